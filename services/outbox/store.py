"""The outbox's SQL: items written in the caller's transaction, claimed under a lease,
renewed, and closed (done, due again after a backoff, or posted nowhere). Every function
runs inside its caller's transaction.

A claim leases each item to one relay for ``LEASE`` (read here only, so a test that
shortens it shortens it everywhere): its due time is pushed ahead and ``leased_by``
names the relay. Claims are serialized (a PostgreSQL advisory lock; SQLite has one
writer), so relays in several processes never hold more of a lane than its width."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import OutboxItem
from services.outbox.model import BULK, NORMAL, Item, Reach, Unshown

_items = cast(sa.Table, OutboxItem.__table__)
LEASE = timedelta(seconds=10)  # renewed every quarter of it while the post runs
KEEP_DONE = timedelta(days=2)
CLAIM_LOCK = 0x71B0_0012  # pg_advisory_xact_lock key that serializes claims


def _row(
    kind: str,
    subject: str,
    payload: dict[str, Any],
    now: datetime,
    *,
    lane: str | None = None,
    priority: int = NORMAL,
    collapse: str | None = None,
    destination: str | None = None,
    due_at: datetime | None = None,
) -> dict[str, Any]:
    return {
        "kind": kind,
        "subject": subject,
        "payload": payload,
        "created_at": now,
        "due_at": due_at or now,
        "attempts": 0,
        "lane": lane or f"{kind}/{subject}"[:160],
        "priority": priority,
        "collapse": collapse,
        "destination": destination,
    }


async def add(
    conn: AsyncConnection,
    *,
    kind: str,
    subject: str,
    payload: dict[str, Any],
    now: datetime,
    lane: str | None = None,
    priority: int = NORMAL,
    collapse: str | None = None,
    destination: str | None = None,
    due_at: datetime | None = None,
) -> None:
    """A post to make once the caller's transaction commits (and only if it does): in
    ``lane`` (the subject's own by default), at ``priority``; with a ``collapse`` key it
    supersedes its subject's older undelivered ``BULK`` items of that key, and is itself
    superseded by a newer one while undelivered if it is ``BULK``. With a ``destination``
    only a relay that reaches it delivers it (``model.Reach``). ``due_at``: not before
    then (a burst of changes gathered into one post); by default at once."""
    await conn.execute(
        _items.insert().values(
            _row(
                kind,
                subject,
                payload,
                now,
                lane=lane,
                priority=priority,
                collapse=collapse,
                destination=destination,
                due_at=due_at,
            )
        )
    )


async def add_many(
    conn: AsyncConnection, *, kind: str, items: list[dict[str, Any]], now: datetime
) -> None:
    """Several posts (each ``{"subject": ..., "payload": ...}``, optionally ``lane``,
    ``priority``, ``collapse`` and ``destination`` as for ``add``) in one statement, in
    the order given (their ids keep that order, so each subject's posts go out in it)."""
    await conn.execute(
        _items.insert(),
        [
            _row(
                kind,
                item["subject"],
                item["payload"],
                now,
                lane=item.get("lane"),
                priority=int(item.get("priority", NORMAL)),
                collapse=item.get("collapse"),
                destination=item.get("destination"),
            )
            for item in items
        ],
    )


def newest(kind: str, subject: str) -> sa.ColumnElement[bool]:
    """The newest item of (kind, subject), delivered or not."""
    newest_id = sa.select(sa.func.max(_items.c.id)).where(
        _items.c.kind == kind, _items.c.subject == subject
    )
    return _items.c.id == sa.func.coalesce(newest_id.scalar_subquery(), 0)


def done_before(
    cutoff: datetime, *, spare: sa.ColumnElement[bool] | None = None
) -> sa.ColumnElement[bool]:
    """The items that may be forgotten: done (delivered or closed) before ``cutoff``, but
    for those ``spare`` selects (the newest audit anchor post, which the anchor job reads).
    serve's hourly job and ``queuebot db prune`` both forget by this rule."""
    done = sa.and_(_items.c.done_at.is_not(None), _items.c.done_at < cutoff)
    return done if spare is None else sa.and_(done, sa.not_(spare))


async def forget_done(
    conn: AsyncConnection, *, before: datetime, spare: sa.ColumnElement[bool] | None = None
) -> None:
    """Drop items delivered before ``before`` (a step of a housekeeping job)."""
    await conn.execute(_items.delete().where(done_before(before, spare=spare)))


async def claim(
    conn: AsyncConnection,
    *,
    now: datetime,
    owner: str,
    kinds: list[str],
    kind: str | None,
    subject: str | None,
    most: int,
    lane_width: int,
    reach: Reach,
) -> list[Item]:
    """Lease to ``owner`` up to ``most`` due items of ``kinds`` whose destination is in
    ``reach``, each the oldest undone of its subject, lanes within ``lane_width`` (not for
    one subject's kick), highest priority and then earliest due first, in that order;
    superseded items are marked done first."""
    if conn.dialect.name == "postgresql":
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": CLAIM_LOCK})
    await _collapse(conn, now)
    picking = _pick(now, kinds, kind, subject, most, lane_width if subject is None else None, reach)
    picked = list((await conn.execute(picking)).scalars())
    if not picked:
        return []
    rows = (
        (
            await conn.execute(
                _items.update()
                .where(
                    _items.c.id.in_(picked),
                    _items.c.done_at.is_(None),
                    _items.c.due_at <= now,
                )
                .values(due_at=now + LEASE, attempts=_items.c.attempts + 1, leased_by=owner)
                .returning(
                    _items.c.id,
                    _items.c.kind,
                    _items.c.subject,
                    _items.c.payload,
                    _items.c.attempts,
                )
            )
        )
        .mappings()
        .all()
    )
    items = [
        Item(
            id=int(row["id"]),
            kind=str(row["kind"]),
            subject=str(row["subject"]),
            payload=dict(row["payload"]),
            attempts=int(row["attempts"]),
        )
        for row in rows
    ]
    order = {number: place for place, number in enumerate(picked)}
    return sorted(items, key=lambda item: order[item.id])


def _pick(  # noqa: PLR0917 - one call site, every value named there
    now: datetime,
    kinds: list[str],
    kind: str | None,
    subject: str | None,
    most: int,
    lane_width: int | None,
    reach: Reach,
) -> sa.Select[tuple[int]]:
    """The ids to claim, in the order they should go out (lanes within ``lane_width``
    unless it is None). Only the oldest undone item of each subject can go (one aggregate
    over the undone items: the cost grows with them, never with their square), and only
    where ``reach`` goes: a subject whose oldest undone item is for another process's
    destination waits for that process."""
    undone = _items.alias("undone")
    heads = sa.select(sa.func.min(undone.c.id).label("id")).where(undone.c.done_at.is_(None))
    if kind is not None:
        heads = heads.where(undone.c.kind == kind)
    if subject is not None:
        heads = heads.where(undone.c.subject == subject)
    head = heads.group_by(undone.c.kind, undone.c.subject).subquery("heads")
    due = _items.alias("due")
    ready = (
        due.c.due_at <= now,  # not in backoff, not leased (or its lease ran out)
        due.c.kind.in_(kinds),
        reached(due.c.destination, reach),
    )
    first = (due.c.priority.desc(), due.c.due_at, due.c.id)
    heads_due = due.join(head, head.c.id == due.c.id)
    if lane_width is None:
        return sa.select(due.c.id).select_from(heads_due).where(*ready).order_by(*first).limit(most)
    ranked = (
        sa.select(
            due.c.id,
            due.c.lane,
            due.c.priority,
            due.c.due_at,
            sa.func.row_number().over(partition_by=due.c.lane, order_by=first).label("place"),
        )
        .select_from(heads_due)
        .where(*ready)
        .subquery("ranked")
    )
    held = _items.alias("held")
    in_hand = (
        sa.select(held.c.lane, sa.func.count().label("n"))
        .where(held.c.done_at.is_(None), held.c.leased_by.is_not(None), held.c.due_at > now)
        .group_by(held.c.lane)
        .subquery("in_hand")
    )
    return (
        sa.select(ranked.c.id)
        .select_from(ranked.outerjoin(in_hand, in_hand.c.lane == ranked.c.lane))
        .where(ranked.c.place <= lane_width - sa.func.coalesce(in_hand.c.n, 0))
        .order_by(ranked.c.priority.desc(), ranked.c.due_at, ranked.c.id)
        .limit(most)
    )


def reached(where: sa.ColumnElement[Any], reach: Reach) -> sa.ColumnElement[bool]:
    """The items whose destination ``where`` is in ``reach`` (none: any relay's)."""
    if reach.everywhere:
        return sa.true()
    return sa.or_(
        where.is_(None),
        *(
            where.startswith(f"{platform}:", autoescape=True)
            for platform in sorted(reach.platforms)
        ),
        *((where.in_(sorted(reach.places)),) if reach.places else ()),
    )


def chat_posts() -> sa.ColumnElement[bool]:
    """The items that are chat posts: not those only a console session can print, which
    wait for it, for good once it has ended (no chat platform is late with them)."""
    where = _items.c.destination
    return sa.or_(where.is_(None), sa.not_(where.startswith("console:", autoescape=True)))


async def _collapse(conn: AsyncConnection, now: datetime) -> None:
    """Mark done, unposted, every undelivered ``BULK`` item that a newer undone item of its
    subject and collapse key supersedes (not one a live relay holds)."""
    newer = _items.alias("newer")
    next_of_key = (
        sa.select(sa.func.min(newer.c.id))
        .where(
            newer.c.kind == _items.c.kind,
            newer.c.subject == _items.c.subject,
            newer.c.collapse == _items.c.collapse,
            newer.c.done_at.is_(None),
            newer.c.id > _items.c.id,
        )
        .scalar_subquery()
    )
    await conn.execute(
        _items.update()
        .where(
            _items.c.done_at.is_(None),
            _items.c.collapse.is_not(None),
            _items.c.priority == BULK,
            sa.or_(_items.c.leased_by.is_(None), _items.c.due_at <= now),
            next_of_key.is_not(None),
        )
        .values(done_at=now, superseded_by=next_of_key)
    )


async def cover(conn: AsyncConnection, item: Item, *, now: datetime) -> int:
    """Mark done, as superseded by ``item``, the other undone items of its kind and
    subject that are due by ``now``: a delivery that reads the state afresh (the board's
    refresh) covers every change written before it. Only for a subject whose items go out
    in order: ``item`` is its oldest undone one, so none of them is held by a relay. How
    many were covered."""
    covered = await conn.execute(
        _items.update()
        .where(
            _items.c.kind == item.kind,
            _items.c.subject == item.subject,
            _items.c.done_at.is_(None),
            _items.c.id != item.id,
            _items.c.due_at <= now,
        )
        .values(done_at=now, superseded_by=item.id)
    )
    return int(covered.rowcount or 0)


async def renew(conn: AsyncConnection, items: list[int], *, owner: str, now: datetime) -> None:
    """Push the leases of ``items`` that are still ``owner``'s and undone to ``LEASE``
    from ``now``."""
    await conn.execute(
        _items.update()
        .where(_items.c.id.in_(items), _items.c.leased_by == owner, _items.c.done_at.is_(None))
        .values(due_at=now + LEASE)
    )


async def finish(conn: AsyncConnection, item: Item, *, now: datetime) -> bool:
    """Mark ``item`` posted inside the caller's transaction, so that what its poster
    records of the post commits together with the mark or not at all: a relay that
    dies after the commit leaves nothing to deliver again, one that dies before leaves
    nothing recorded. True when this claim of the item is its newest (record the
    post); False when another relay claimed it since (that one records it)."""
    marked = await conn.execute(
        _items.update()
        .where(_items.c.id == item.id, _items.c.attempts == item.attempts)
        .values(done_at=sa.func.coalesce(_items.c.done_at, now))
    )
    return marked.rowcount == 1


async def mark_done(conn: AsyncConnection, items: list[int], *, now: datetime) -> None:
    """Record ``items`` delivered at ``now``."""
    await conn.execute(_items.update().where(_items.c.id.in_(items)).values(done_at=now))


async def close_nowhere(
    conn: AsyncConnection, item: int, *, owner: str, now: datetime, why: str
) -> None:
    """Close an item ``owner`` holds that has nowhere to go, keeping why (not posted)."""
    await conn.execute(
        _items.update()
        .where(_items.c.id == item, _items.c.leased_by == owner)
        .values(done_at=now, last_error=why[:500], leased_by=None)
    )


async def retry_later(
    conn: AsyncConnection, item: int, *, owner: str, due_at: datetime, error: str
) -> None:
    """Release an item ``owner`` holds whose post failed: due again at ``due_at``,
    with the error kept."""
    await conn.execute(
        _items.update()
        .where(_items.c.id == item, _items.c.leased_by == owner)
        .values(due_at=due_at, last_error=error, leased_by=None)
    )


async def oldest_undone(
    conn: AsyncConnection, kind: str, subject: str
) -> tuple[str, str | None] | None:
    """The error of the subject's oldest undone item (``""`` when it never failed) and its
    destination; ``None`` when the subject has none."""
    oldest = (
        await conn.execute(
            sa.select(_items.c.last_error, _items.c.destination)
            .where(
                _items.c.kind == kind,
                _items.c.subject == subject,
                _items.c.done_at.is_(None),
            )
            .order_by(_items.c.id)
            .limit(1)
        )
    ).first()
    if oldest is None:
        return None
    return str(oldest[0] or ""), oldest[1]


async def unshown(conn: AsyncConnection, kind: str, subject: str) -> Unshown:
    """The subject's posts nobody has been shown: those still undone, and those closed as
    posted nowhere (``close_nowhere``: done, neither superseded nor leased, an error
    kept; a delivered item keeps the lease of the relay that delivered it)."""
    nowhere = sa.and_(
        _items.c.done_at.is_not(None),
        _items.c.superseded_by.is_(None),
        _items.c.leased_by.is_(None),
        _items.c.last_error.is_not(None),
    )
    rows = (
        await conn.execute(
            sa.select(
                _items.c.done_at.is_(None).label("waiting"),
                _items.c.created_at,
                _items.c.destination,
                _items.c.last_error,
            )
            .where(
                _items.c.kind == kind,
                _items.c.subject == subject,
                sa.or_(_items.c.done_at.is_(None), nowhere),
            )
            .order_by(_items.c.id)
        )
    ).all()
    waiting = [row for row in rows if row.waiting]
    closed = [row for row in rows if not row.waiting]
    first = waiting[0] if waiting else None
    return Unshown(
        waiting=len(waiting),
        since=_utc(first.created_at) if first else None,
        where=first.destination if first else None,
        error=first.last_error if first else None,
        closed=len(closed),
        why=closed[-1].last_error if closed else None,
    )


def _utc(when: datetime) -> datetime:
    """SQLite gives back naive times; queuebot writes UTC."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
