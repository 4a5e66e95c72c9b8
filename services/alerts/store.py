"""The alerts' SQL: the inbox of notifications (``qb_alert_inbox``), the alert groups
(``qb_alert_groups``) and the outbox items of their posts. Every function runs inside the
caller's transaction or read.

``read_group`` is the one read of a group for anything outside processing (the thread's
delivery, an incident declared from an alert): its typed record, or None."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from services import outbox as relay
from services.alerts.model import (
    AlertGroup,
    AlertPost,
    PostReply,
    PostUpdate,
    Roots,
    SetAside,
    records,
)
from services.alerts.payload import Notification
from services.alerts.routes import Destination
from services.db.tables import AlertGroup as AlertGroupRow
from services.db.tables import AlertInbox
from services.estate.profile import as_utc

INBOX = cast(sa.Table, AlertInbox.__table__)
GROUPS = cast(sa.Table, AlertGroupRow.__table__)
ALERT_POST = "alert.post"  # the outbox kind of alert threads' posts
KEEP_PROCESSED = timedelta(days=7)
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
    "truncated",
)


def key_hash(source: str, receiver: str, group_key: str) -> str:
    return hashlib.sha256(f"{source}\x00{receiver}\x00{group_key}".encode()).hexdigest()


def subject(group_id: int) -> str:
    """The outbox subject of a group's posts: they go out in the order written."""
    return f"alert:{group_id}"


# -- the inbox -----------------------------------------------------------------------


def inbox_row(notification: Notification, *, source: str, now: datetime) -> dict[str, Any]:
    return {
        "source": source,
        "received_at": now,
        "receiver": notification.receiver,
        "group_key": notification.groupKey,
        "status": notification.status,
        "payload": notification.stored(),
    }


async def store_notification(
    conn: AsyncConnection, notification: Notification, *, source: str, now: datetime
) -> None:
    """Put a notification in the inbox (inside the caller's transaction). The row goes as
    parameters: a statement holding it would be kept, with the whole payload, in
    SQLAlchemy's cache of compiled statements."""
    await conn.execute(INBOX.insert(), inbox_row(notification, source=source, now=now))


async def claim(
    conn: AsyncConnection, *, limit: int, only: Sequence[int] | None
) -> list[tuple[int, str, str]]:
    """The next unprocessed notifications not set aside (of ``only``, when given), locked
    (``FOR UPDATE SKIP LOCKED``, so replicas share the work), in order: id, source and
    the payload as text (so one row that is not JSON fails only itself)."""
    query = (
        sa.select(INBOX.c.id, INBOX.c.source, sa.cast(INBOX.c.payload, sa.Text))
        .where(INBOX.c.processed_at.is_(None), INBOX.c.set_aside_at.is_(None))
        .order_by(INBOX.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if only is not None:
        query = query.where(INBOX.c.id.in_(list(only)))
    rows = (await conn.execute(query)).all()
    return [(int(row_id), str(source), str(text)) for row_id, source, text in rows]


async def mark_processed(conn: AsyncConnection, ids: Sequence[int], now: datetime) -> None:
    await conn.execute(INBOX.update().where(INBOX.c.id.in_(list(ids))).values(processed_at=now))


async def mark_set_aside(conn: AsyncConnection, row_id: int, error: str, now: datetime) -> bool:
    """Set a notification aside with why; False when it was processed or set aside
    already."""
    result = await conn.execute(
        INBOX.update()
        .where(
            INBOX.c.id == row_id,
            INBOX.c.processed_at.is_(None),
            INBOX.c.set_aside_at.is_(None),
        )
        .values(set_aside_at=now, error=error)
    )
    return bool(result.rowcount)


async def set_aside(conn: AsyncConnection) -> SetAside:
    """The notifications set aside now: one read of a partial index that holds only
    them."""
    row = (
        await conn.execute(
            sa.select(
                INBOX.c.id,
                INBOX.c.set_aside_at,
                INBOX.c.error,
                sa.func.count().over(),
            )
            .where(INBOX.c.set_aside_at.is_not(None))
            .order_by(INBOX.c.id)
            .limit(1)
        )
    ).first()
    if row is None:
        return SetAside(0)
    return SetAside(int(row[3]), int(row[0]), as_utc(row[1]), row[2])


def processed_before(cutoff: datetime) -> sa.ColumnElement[bool]:
    """The notifications that may be forgotten: processed before ``cutoff`` and not set
    aside (failed, kept for a person). serve's hourly job and ``queuebot db prune`` both
    forget by this rule."""
    return sa.and_(
        INBOX.c.processed_at.is_not(None),
        INBOX.c.processed_at < cutoff,
        INBOX.c.set_aside_at.is_(None),
    )


async def forget_processed(conn: AsyncConnection, *, before: datetime) -> None:
    """Drop notifications processed before ``before`` (a step of a housekeeping job)."""
    await conn.execute(INBOX.delete().where(processed_before(before)))


# -- the groups ----------------------------------------------------------------------


def group_of(row: RowMapping) -> AlertGroup:
    """A row of ``qb_alert_groups`` as its record (SQLite gives times back without a
    zone: they are UTC)."""
    opened_at, changed_at = as_utc(row["opened_at"]), as_utc(row["changed_at"])
    assert opened_at is not None and changed_at is not None
    return AlertGroup(
        id=int(row["id"]),
        key_hash=str(row["key_hash"]),
        source=str(row["source"]),
        receiver=str(row["receiver"]),
        group_key=str(row["group_key"]),
        alertname=str(row["alertname"]),
        queue=row["queue"],
        route=Destination.from_json(row["route"] or {}),
        labels=dict(row["labels"] or {}),
        annotations=dict(row["annotations"] or {}),
        links=dict(row["links"] or {}),
        status="firing" if row["status"] == "firing" else "resolved",
        alerts=records(row["alerts"]),
        episode=int(row["episode"]),
        opened_at=opened_at,
        changed_at=changed_at,
        resolved_at=as_utc(row["resolved_at"]),
        notifications=int(row["notifications"]),
        truncated=int(row["truncated"] or 0),
        roots=Roots.from_json(row["roots"]),
    )


async def read_group(conn: AsyncConnection, number: int) -> AlertGroup | None:
    """Alert group ``number`` as it is now; None when there is none."""
    row = (await conn.execute(sa.select(GROUPS).where(GROUPS.c.id == number))).mappings().first()
    return None if row is None else group_of(row)


def new_group(
    key: str,
    *,
    source: str,
    notification: Notification,
    alertname: str,
    labels: Mapping[str, str],
    where: Destination,
    now: datetime,
) -> dict[str, Any]:
    """The row of a group its first notification opens (resolved, episode 0: merging the
    notification into it makes its first change)."""
    return {
        "key_hash": key,
        "source": source,
        "receiver": notification.receiver,
        "group_key": notification.groupKey,
        "alertname": alertname[:200],
        "queue": where.queue,
        "route": where.json(),
        "labels": dict(labels),
        "annotations": dict(notification.commonAnnotations),
        "links": {},
        "status": "resolved",
        "alerts": {},
        "episode": 0,
        "opened_at": now,
        "changed_at": now,
        "resolved_at": None,
        "notifications": 0,
        "truncated": 0,
        "roots": {},
    }


async def missing(conn: AsyncConnection, keys: Iterable[str]) -> list[str]:
    """Which of ``keys`` have no group yet, in order."""
    wanted = sorted(set(keys))
    present = set(
        (await conn.execute(sa.select(GROUPS.c.key_hash).where(GROUPS.c.key_hash.in_(wanted))))
        .scalars()
        .all()
    )
    return [key for key in wanted if key not in present]


async def create_groups(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert new groups; one a concurrent pass created first is left as it is."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    await conn.execute(insert(GROUPS).values(list(rows)).on_conflict_do_nothing())


async def lock_groups(conn: AsyncConnection, keys: Iterable[str]) -> dict[str, AlertGroup]:
    """The groups of ``keys``, locked in a fixed order (no deadlock between replicas)."""
    locked = (
        await conn.execute(
            sa.select(GROUPS)
            .where(GROUPS.c.key_hash.in_(sorted(set(keys))))
            .order_by(GROUPS.c.key_hash)
            .with_for_update()
        )
    ).mappings()
    return {str(row["key_hash"]): group_of(row) for row in locked}


async def save_groups(conn: AsyncConnection, groups: Iterable[AlertGroup]) -> None:
    """What processing changed in ``groups``: one statement for all of them."""
    await conn.execute(
        GROUPS.update()
        .where(GROUPS.c.id == sa.bindparam("group_id"))
        .values({name: sa.bindparam(name) for name in _KEPT}),
        [
            {
                "group_id": g.id,
                "status": g.status,
                "alerts": {fp: record.json() for fp, record in g.alerts.items()},
                "episode": g.episode,
                "changed_at": g.changed_at,
                "resolved_at": g.resolved_at,
                "notifications": g.notifications,
                "annotations": g.annotations,
                "links": g.links,
                "truncated": g.truncated,
            }
            for g in groups
        ],
    )


async def store_roots(conn: AsyncConnection, number: int, roots: Roots) -> None:
    await conn.execute(GROUPS.update().where(GROUPS.c.id == number).values(roots=roots.json()))


# -- the posts -----------------------------------------------------------------------


def outbox_item(group: AlertGroup, post: AlertPost) -> dict[str, Any]:
    """A post of the group as the outbox holds it, in the lane of the group's first
    channel. Its root and triage are ``NORMAL``; its root updates ``BULK``, each
    superseded by a newer one of its episode while undelivered (an update shows the
    group as it is when delivered); its news ``BULK``, superseded by newer news or by its
    turns (fired again, resolved), which are ``NORMAL`` and always go out."""
    item: dict[str, Any] = {"subject": subject(group.id), "payload": post.to_payload()}
    if group.route.channels:
        item["lane"] = relay.channel_lane(group.route.channels[0])
    if isinstance(post, PostUpdate | PostReply):
        item["collapse"] = f"{post.kind}:{post.episode}"
        turn = isinstance(post, PostReply) and post.turn
        item["priority"] = relay.NORMAL if turn else relay.BULK
    return item


async def queue_posts(
    conn: AsyncConnection, posts: Sequence[tuple[AlertGroup, AlertPost]], *, now: datetime
) -> None:
    """The posts of groups, in the order made: one statement."""
    if posts:
        items = [outbox_item(group, post) for group, post in posts]
        await relay.add_many(conn, kind=ALERT_POST, items=items, now=now)
