"""Alerts in: notifications are stored in the inbox before they are acknowledged, then
processed into their group's state and the chat posts it needs (through the outbox).

Storing is one INSERT, so the webhook answers fast and a store that fails is a 503
Alertmanager retries. Processing runs beside it: it claims unprocessed notifications in
order (``FOR UPDATE SKIP LOCKED``, so replicas share the work), locks their groups in a
fixed order (no deadlock between replicas), merges each notification into its group and
writes the posts of real changes to the outbox in the same transaction. A notification
that changes nothing (Alertmanager's repeats) posts nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox as relay
from services.alert_settings import AlertsConfig
from services.alerts import groups, messages
from services.alerts.group_commit import GroupCommit
from services.alerts.groups import AlertRecord, Merge
from services.alerts.payload import Notification, from_stored
from services.alerts.routes import destination
from services.db import Outage, transaction
from services.errors import DatabaseUnavailable
from services.estate.profile import as_utc
from services.models import AlertGroup, AlertInbox
from services.outbox import Outbox

log = logging.getLogger("queuebot.alerts")
INBOX = cast(sa.Table, AlertInbox.__table__)
GROUPS = cast(sa.Table, AlertGroup.__table__)
ALERT_POST = "alert.post"  # the outbox kind of alert threads' posts
BATCH = 500
# what processing changes in a group row
_KEPT = (
    "status",
    "alerts",
    "episode",
    "changed_at",
    "resolved_at",
    "notifications",
    "annotations",
    "links",
)
KEEP_PROCESSED = timedelta(days=7)


class FiringCounter(Protocol):
    def detector_fired(self, detector: str) -> None: ...


class AlertCounters(FiringCounter, Protocol):
    def alert_received(self, source: str) -> None: ...

    def alert_posted(self, kind: str) -> None: ...


def key_hash(source: str, receiver: str, group_key: str) -> str:
    return hashlib.sha256(f"{source}\x00{receiver}\x00{group_key}".encode()).hexdigest()


def subject(group_id: int) -> str:
    return f"alert:{group_id}"


def _row(notification: Notification, *, source: str, now: datetime) -> dict[str, Any]:
    return {
        "source": source,
        "received_at": now,
        "receiver": notification.receiver,
        "group_key": notification.groupKey,
        "status": notification.status,
        "payload": notification.stored(),
    }


async def store(
    conn: AsyncConnection, notification: Notification, *, source: str, now: datetime
) -> None:
    """Put a notification in the inbox (inside the caller's transaction). The row goes as
    parameters: a statement holding it would be kept, with the whole payload, in
    SQLAlchemy's cache of compiled statements."""
    await conn.execute(INBOX.insert(), _row(notification, source=source, now=now))


@dataclass(frozen=True)
class _Row:
    id: int
    source: str
    notification: Notification


class AlertDesk:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        config: AlertsConfig,
        queues: Sequence[str],
        outbox: Outbox,
        counters: AlertCounters | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.config = config
        self.queues = list(queues)
        self.outbox = outbox
        self.counters = counters
        self._wake: asyncio.Event | None = None
        self._elsewhere: Callable[[], None] | None = None
        self._inbox = GroupCommit(engine, INBOX, subject="the alert inbox")

    async def receive(self, notification: Notification, *, source: str = "alertmanager") -> None:
        """Store a notification; return once it is committed. Raises DatabaseUnavailable
        (and anything else the database says) when it could not be stored. Notifications
        arriving together are written in one commit (``GroupCommit``)."""
        await self._inbox.write(_row(notification, source=source, now=self.clock()))
        if self.counters is not None:
            self.counters.alert_received(source)
        self.wake()

    def wake(self) -> None:
        """Notifications were stored: processing starts its next pass now (here, or in
        the process ``forward_wakes`` named)."""
        if self._wake is not None:
            self._wake.set()
        if self._elsewhere is not None:
            self._elsewhere()

    def forward_wakes(self, to: Callable[[], None]) -> None:
        """Processing runs in another process (serve's worker): ``to`` tells it."""
        self._elsewhere = to

    async def process_due(self, limit: int = BATCH) -> int:
        """Process up to ``limit`` stored notifications; how many were processed."""
        now = self.clock()
        async with transaction(self.engine, subject="the alert inbox") as conn:
            rows = (
                await conn.execute(
                    sa.select(INBOX.c.id, INBOX.c.source, INBOX.c.payload)
                    .where(INBOX.c.processed_at.is_(None))
                    .order_by(INBOX.c.id)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            if not rows:
                return 0
            batch = [_Row(int(r[0]), str(r[1]), from_stored(dict(r[2]))) for r in rows]
            posted = await self._apply(conn, batch, now)
            await conn.execute(
                INBOX.update().where(INBOX.c.id.in_([r.id for r in batch])).values(processed_at=now)
            )
        if posted:
            self.outbox.wake()
        return len(batch)

    async def run_forever(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        self._wake = asyncio.Event()
        outage = Outage(log, "alert processing")
        while not stop.is_set():
            try:
                while await self.process_due():
                    pass
                outage.passed()
            except DatabaseUnavailable as exc:
                outage.failed(exc)
            except Exception:
                log.exception("processing stored alerts failed; trying again")
            self._wake.clear()
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()

    # -- processing ------------------------------------------------------------------

    async def _apply(self, conn: AsyncConnection, batch: Sequence[_Row], now: datetime) -> int:
        firsts: dict[str, _Row] = {}
        for row in batch:
            n = row.notification
            firsts.setdefault(key_hash(row.source, n.receiver, n.groupKey), row)
        await self._create_missing(conn, firsts, now)
        locked = (
            await conn.execute(
                sa.select(GROUPS)
                .where(GROUPS.c.key_hash.in_(sorted(firsts)))
                .order_by(GROUPS.c.key_hash)
                .with_for_update()
            )
        ).mappings()
        state = {str(g["key_hash"]): dict(g) for g in locked}
        posts: list[dict[str, Any]] = []
        for row in batch:
            n = row.notification
            group = state[key_hash(row.source, n.receiver, n.groupKey)]
            for payload in self._merge_into(group, n, now):
                posts.append(_outbox_item(group, payload))
        # one statement for the batch's groups and one for its posts (in the order made)
        await conn.execute(
            GROUPS.update()
            .where(GROUPS.c.id == sa.bindparam("group_id"))
            .values({name: sa.bindparam(name) for name in _KEPT}),
            [{"group_id": g["id"], **{name: g[name] for name in _KEPT}} for g in state.values()],
        )
        if posts:
            await relay.add_many(conn, kind=ALERT_POST, items=posts, now=now)
        return len(posts)

    async def _create_missing(
        self, conn: AsyncConnection, firsts: dict[str, _Row], now: datetime
    ) -> None:
        present = set(
            (
                await conn.execute(
                    sa.select(GROUPS.c.key_hash).where(GROUPS.c.key_hash.in_(list(firsts)))
                )
            ).scalars()
        )
        missing = [key for key in sorted(firsts) if key not in present]
        if not missing:
            return
        values = [self._new_group(key, firsts[key], now) for key in missing]
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        await conn.execute(insert(GROUPS).values(values).on_conflict_do_nothing())

    def _new_group(self, key: str, row: _Row, now: datetime) -> dict[str, Any]:
        n = row.notification
        labels = {**n.commonLabels, **n.groupLabels}
        alertname = labels.get("alertname") or (n.alerts[0].name if n.alerts else "alert")
        where = destination(self.config, alertname=alertname, labels=labels, queues=self.queues)
        return {
            "key_hash": key,
            "source": row.source,
            "receiver": n.receiver,
            "group_key": n.groupKey,
            "alertname": alertname[:200],
            "queue": where.queue,
            "route": where.json(),
            "labels": labels,
            "annotations": dict(n.commonAnnotations),
            "links": {},
            "status": "resolved",
            "alerts": {},
            "episode": 0,
            "opened_at": now,
            "changed_at": now,
            "resolved_at": None,
            "notifications": 0,
            "roots": {},
        }

    def _merge_into(
        self, group: dict[str, Any], n: Notification, now: datetime
    ) -> list[dict[str, Any]]:
        """Merge one notification into ``group`` (in place); the posts it makes."""
        known = {fp: AlertRecord.from_json(fp, data) for fp, data in group["alerts"].items()}
        result = groups.merge(known, n)
        group["notifications"] = int(group["notifications"]) + 1
        if n.commonAnnotations:
            group["annotations"] = dict(n.commonAnnotations)
        group["links"] = _links(n)
        group["alerts"] = {fp: record.json() for fp, record in result.alerts.items()}
        if not result.changed:
            return []
        before = str(group["status"])
        group["status"] = result.status
        group["changed_at"] = now
        posts = self._posts(group, result, before, now)
        if result.status == "resolved" and before == "firing":
            group["resolved_at"] = now
        elif result.status == "firing":
            group["resolved_at"] = None
        return posts

    def _posts(
        self, group: dict[str, Any], result: Merge, before: str, now: datetime
    ) -> list[dict[str, Any]]:
        common = dict(group["labels"])
        episode = int(group["episode"])
        if before != "firing" and result.status == "firing":
            resolved_at = group["resolved_at"]
            reopen = timedelta(hours=self.config.reopen_hours)
            if episode == 0 or resolved_at is None or now - (as_utc(resolved_at) or now) > reopen:
                group["episode"] = episode + 1
                posts = [{"action": "root", "episode": episode + 1}]
                if group["route"].get("triage") and group.get("queue"):
                    posts.append({"action": "triage", "episode": episode + 1})
                return [{**p, "group": int(group["id"])} for p in posts]
        refired = before != "firing" and result.status == "firing"
        group_resolved = before == "firing" and result.status == "resolved"
        started = min((a.starts_at for a in result.alerts.values() if a.starts_at), default=None)
        message = messages.news(
            started=result.started,
            resolved=result.resolved,
            common=common,
            group_resolved=group_resolved,
            refired=refired,
            lasted=messages.lasted(started, now) if group_resolved else None,
        )
        return [
            {
                "action": "reply",
                "group": int(group["id"]),
                "episode": episode,
                "message": messages.to_json(message),
                "turn": refired or group_resolved,  # the group fired or resolved as a whole
            },
            {"action": "update", "group": int(group["id"]), "episode": episode},
        ]

    @property
    def firings(self) -> FiringCounter | None:
        return self.counters


async def forget_processed(conn: AsyncConnection, *, before: datetime) -> None:
    """Drop notifications processed before ``before`` (a step of a housekeeping job)."""
    await conn.execute(
        INBOX.delete().where(INBOX.c.processed_at.is_not(None), INBOX.c.processed_at < before)
    )


def _outbox_item(group: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """A post of the group as the outbox holds it, in the lane of the group's first
    channel. Its root and triage are ``NORMAL``; its root updates ``BULK``, each
    superseded by a newer one of its episode while undelivered (an update shows the
    group as it is when delivered); its news ``BULK``, superseded by newer news or by its
    turns (fired again, resolved), which are ``NORMAL`` and always go out."""
    channels = group["route"].get("channels") or []
    item: dict[str, Any] = {"subject": subject(int(group["id"])), "payload": payload}
    if channels:
        item["lane"] = relay.channel_lane(str(channels[0]))
    action = str(payload["action"])
    if action in ("update", "reply"):
        item["collapse"] = f"{action}:{payload['episode']}"
        item["priority"] = relay.NORMAL if payload.get("turn") else relay.BULK
    return item


def _links(n: Notification) -> dict[str, str]:
    links: dict[str, str] = {}
    source = next((a.generatorURL for a in n.alerts if a.generatorURL), "")
    if source:
        links["Source"] = source
    if n.externalURL:
        links["Alertmanager"] = n.externalURL
    return links
