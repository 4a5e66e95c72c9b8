"""Residue of every kind, old and recent, done and not done, for the tests of ``db
prune`` (the service's and the command line's)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services import retention
from services.audit.anchors import ANCHOR, SUBJECT
from services.db.tables import AlertInbox, Delivery, OutboxItem, QueueSample

AGE = timedelta(days=30)
OLD = timedelta(days=45)  # older than AGE
RECENT = timedelta(days=3)  # younger than AGE


def _outbox(
    id_: int, now: datetime, *, done: timedelta | None, kind: str = "chat", subject: str = "x"
) -> dict[str, Any]:
    created = now - (done or timedelta(0)) - timedelta(minutes=1)
    return {
        "id": id_,
        "kind": kind,
        "subject": subject,
        "payload": {"anchor": f"{id_}:abc"} if kind == ANCHOR else {"text": "hello"},
        "created_at": created,
        "due_at": created,
        "done_at": None if done is None else now - done,
    }


def _delivery(key: str, now: datetime, seen: timedelta, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "key": key,
        "seen_at": now - seen,
        "state": "done",
        "owner": None,
        "request": None,
        "answered_at": None,
    }
    row.update(extra)
    return row


def _sample(id_: int, queue: str, at: datetime) -> dict[str, Any]:
    return {
        "id": id_,
        "queue": queue,
        "at": at,
        "total": 1,
        "dead": 0,
        "pending": 0,
        "counts": {},
        "detail": None,
    }


def _inbox(id_: int, now: datetime, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": id_,
        "source": "alertmanager",
        "received_at": now - OLD - timedelta(minutes=1),
        "receiver": "queuebot",
        "group_key": "{}:{alertname=x}",
        "status": "firing",
        "payload": {},
        "processed_at": None,
        "set_aside_at": None,
        "error": None,
    }
    row.update(extra)
    return row


# the rows each table must keep, by key, once a prune with AGE has run
KEPT = {
    "qb_outbox": {1002, 1003, 1005},
    "qb_deliveries": {"recent", "claimed", "unanswered"},
    "qb_queue_samples": {2000, 2003, 2004},
    "qb_alert_inbox": {3002, 3003, 3004},
}
GONE = {"qb_outbox": 2, "qb_deliveries": 3, "qb_queue_samples": 2, "qb_alert_inbox": 2}


async def seed(engine: AsyncEngine, now: datetime) -> None:
    """Residue of every kind, old and recent, done and not done."""
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(OutboxItem),
            [
                _outbox(1001, now, done=OLD),  # delivered long ago: goes
                _outbox(1002, now, done=RECENT),  # delivered lately: stays
                _outbox(1003, now, done=None),  # not delivered yet: stays
                _outbox(1004, now, done=OLD, kind=ANCHOR, subject=SUBJECT),  # an older anchor
                _outbox(1005, now, done=OLD, kind=ANCHOR, subject=SUBJECT),  # the newest: stays
            ],
        )
        answered = {"request": {"command": "/queue dlq"}, "answered_at": now - OLD}
        await conn.execute(
            sa.insert(Delivery),
            [
                _delivery("old", now, OLD),
                _delivery("old-answered", now, OLD, **answered),
                _delivery("old-2", now, OLD + timedelta(days=1)),
                _delivery("recent", now, RECENT),
                _delivery("claimed", now, OLD, state="claimed", owner="gone"),
                # acknowledged, its answer never went out: a restarted process answers it
                _delivery("unanswered", now, OLD, request={"command": "/queue dlq"}),
            ],
        )
        await conn.execute(
            sa.insert(QueueSample),
            [
                _sample(2000, "clips", now - timedelta(days=10)),  # within the sampler's 14 days
                _sample(2001, "clips", now - OLD),
                _sample(2002, "clips", now - OLD + timedelta(minutes=1)),
                _sample(2003, "clips", now - RECENT),
                _sample(2004, "gone-queue", now - OLD),  # that queue's newest count
            ],
        )
        await conn.execute(
            sa.insert(AlertInbox),
            [
                _inbox(3001, now, processed_at=now - OLD),
                _inbox(3002, now, processed_at=now - RECENT),
                _inbox(3003, now, set_aside_at=now - OLD, error="bad payload"),  # for a person
                _inbox(3004, now),  # not processed yet
                _inbox(3005, now, processed_at=now - OLD - timedelta(hours=1)),
            ],
        )


async def keys(engine: AsyncEngine) -> dict[str, set[object]]:
    async with engine.connect() as conn:
        return {
            r.name: set((await conn.execute(sa.select(r.key))).scalars()) for r in retention.RESIDUE
        }
