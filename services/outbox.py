"""The transactional outbox: chat posts a change makes are written in the change's own
transaction and delivered after it, retried until they go out.

``add`` writes an item inside the caller's transaction, so a post exists exactly when the
change it reports committed. The relay delivers items outside any transaction and marks
each done, or due again after a backoff with the error kept. What it promises:

- **In order per subject.** Items of one subject go out in the order they were written:
  an item waits while an older one of its subject is undone.
- **Per channel.** Each item names its *lane*, the channel it posts to (an alert group's
  channel, an audience's; by default its subject's own lane). A lane has at most
  ``lane_width`` items in hand at once (one by default), so a channel waiting out its
  pace or a 429's Retry-After holds only its own next item, while the relay keeps up to
  ``IN_FLIGHT`` deliveries going in other lanes.
- **By priority.** Among due items the relay takes the highest priority first (an
  incident's checklist, reminders and escalations are ``URGENT``; alert updates and news
  ``BULK``; the rest ``NORMAL``), and within a priority the oldest due first.
- **Collapse.** An undelivered ``BULK`` item with a collapse key is superseded by any
  newer item of its subject with the same key: it is marked done (``superseded_by``) and
  never posted. Items of other priorities are never superseded, and the newest of a key
  always goes out. Alert groups use it under a backlog: a root update is superseded by a
  newer one, news of a change by newer news or by the resolution; their roots,
  resolutions and re-firings always go out.
- **Short leases, renewed.** A claimed item is leased to its relay for ``LEASE`` (its due
  time pushed ahead, ``leased_by`` naming the relay), and the relay renews the lease every
  quarter of it while the delivery runs, however long (a 429 waited out). A relay that
  dies stops renewing, and its items come due again within ``LEASE``: another relay
  delivers them, so delivery is at least once. An update of a message is idempotent; a
  thread post delivered just before a crash can show twice (never zero times). A live
  relay's slow post is never taken over while its renewals reach the database.

Claims are serialized (a PostgreSQL advisory lock; SQLite has one writer), so relays in
several processes never hold more of a lane than its width. After a commit, ``kick``
delivers the subject's items at once (its own subject's order, not its lane's width), so
a reply to a person comes after the posts it reports; the relay loop (``run_forever``)
picks up everything else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.db import Outage, transaction
from services.errors import ConfigError, DatabaseUnavailable
from services.known_problems import KnownProblems
from services.ledger import process_owner
from services.models import OutboxItem
from services.scheduler import FollowUp, PostsDeferred

log = logging.getLogger("queuebot.outbox")
_items = cast(sa.Table, OutboxItem.__table__)
LEASE = timedelta(seconds=10)  # renewed every quarter of it while the delivery runs
MAX_BACKOFF = timedelta(minutes=5)
HANDOVER = 10.0  # seconds a kick waits for another relay's delivery of its subject
HANDOVER_POLL = 0.05
CLAIM = 20  # items ``run_due`` claims at once (delivered side by side)
IN_FLIGHT = 64  # deliveries ``run_forever`` keeps going at once, across lanes
LANE_WIDTH = 1  # items of one lane in hand at once
STOP_GRACE = 5.0  # seconds a stopping relay gives the deliveries in hand
MIN_PASS = 0.02  # seconds between a relay's passes at least: deliveries that end together
# free their lanes for one claim
KEEP_DONE = timedelta(days=2)
CLAIM_LOCK = 0x71B0_0012  # pg_advisory_xact_lock key that serializes claims

BULK, NORMAL, URGENT = 0, 1, 2  # priorities: higher goes first


@dataclass(frozen=True)
class Item:
    id: int
    kind: str
    subject: str
    payload: dict[str, Any]
    attempts: int


Deliver = Callable[[Item], Awaitable[None]]


NO_PLATFORM = (
    "no chat platform is configured (neither SLACK_BOT_TOKEN nor DISCORD_BOT_TOKEN is set)"
)
NOT_POSTED = f"not posted: {NO_PLATFORM}"  # the record of a post that went nowhere


class PostedNowhere(Exception):
    """A deliverer's word that its item has nowhere to go (no chat platform is
    configured): the item is closed, never retried, with the reason kept as its
    ``last_error``, instead of being recorded as posted."""


def channel_lane(channel: str) -> str:
    """The lane of posts to a channel named in the configuration (``[channels.NAME]``)."""
    return f"channel:{channel}"[:160]


def _row(
    kind: str,
    subject: str,
    payload: dict[str, Any],
    now: datetime,
    *,
    lane: str | None = None,
    priority: int = NORMAL,
    collapse: str | None = None,
) -> dict[str, Any]:
    return {
        "kind": kind,
        "subject": subject,
        "payload": payload,
        "created_at": now,
        "due_at": now,
        "attempts": 0,
        "lane": lane or f"{kind}/{subject}"[:160],
        "priority": priority,
        "collapse": collapse,
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
) -> None:
    """A post to make once the caller's transaction commits (and only if it does): in
    ``lane`` (the subject's own by default), at ``priority``; with a ``collapse`` key it
    supersedes its subject's older undelivered ``BULK`` items of that key, and is itself
    superseded by a newer one while undelivered if it is ``BULK``."""
    await conn.execute(
        _items.insert().values(
            _row(kind, subject, payload, now, lane=lane, priority=priority, collapse=collapse)
        )
    )


async def add_many(
    conn: AsyncConnection, *, kind: str, items: list[dict[str, Any]], now: datetime
) -> None:
    """Several posts (each ``{"subject": ..., "payload": ...}``, optionally ``lane``,
    ``priority`` and ``collapse`` as for ``add``) in one statement, in the order given
    (their ids keep that order, so each subject's posts go out in it)."""
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
            )
            for item in items
        ],
    )


async def forget_done(conn: AsyncConnection, *, before: datetime) -> None:
    """Drop items delivered before ``before`` (a step of a housekeeping job)."""
    await conn.execute(_items.delete().where(_items.c.done_at < before))


class Outbox:
    """Delivers the items of the kinds registered with it."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        lane_width: int = LANE_WIDTH,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.lane_width = max(1, lane_width)
        self.owner = f"outbox:{process_owner()}"[:64]
        self.deliverers: dict[str, Deliver] = {}
        self.problems = KnownProblems(log, "the outbox relay")
        self._wake: asyncio.Event | None = None
        self._elsewhere: Callable[[], None] | None = None
        self._leases = _Leases(self)

    def wake(self) -> None:
        """New items were committed: relays waiting for their next pass start it now
        (here, or in the process ``forward_wakes`` named)."""
        if self._wake is not None:
            self._wake.set()
        if self._elsewhere is not None:
            self._elsewhere()

    def forward_wakes(self, to: Callable[[], None]) -> None:
        """The relays run in another process (serve's worker): ``to`` tells it."""
        self._elsewhere = to

    def register(self, kind: str, deliver: Deliver) -> None:
        self.deliverers[kind] = deliver

    def kick(self, kind: str, subject: str) -> FollowUp:
        """After a commit: deliver the subject's due items now. Raises ``PostsDeferred``
        when one failed (it stays in the outbox and is retried).

        A relay (here, or in serve's worker, woken by the same commit) may have claimed
        one of them first: its delivery is waited for (``HANDOVER`` at most), and the
        subject's later items delivered here, so the caller's reply still comes after
        the posts it reports, and "still on its way" only when it really is."""

        async def deliver_now() -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + HANDOVER
            while True:
                failures = await self.run_due(kind=kind, subject=subject)
                if failures:
                    raise PostsDeferred("; ".join(failures))
                held = await self._held_back(kind, subject)
                if held is None:
                    return
                error, elsewhere = held
                if not elsewhere or loop.time() > deadline:
                    raise PostsDeferred(error)  # behind an older post that failed
                await asyncio.sleep(HANDOVER_POLL)

        return deliver_now

    async def _held_back(self, kind: str, subject: str) -> tuple[str, bool] | None:
        """Why the subject still has undone items, if it has: the oldest one's error, and
        whether another relay is delivering it (it never failed: it is leased)."""
        async with transaction(self.engine, subject="the outbox") as conn:
            oldest = (
                await conn.execute(
                    sa.select(_items.c.last_error)
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
        if oldest[0]:
            return str(oldest[0]), False
        return "an earlier post is still on its way", True

    async def run_due(
        self, *, limit: int = 100, kind: str | None = None, subject: str | None = None
    ) -> list[str]:
        """Deliver due items (of one subject, when given); the errors of those that failed.

        Items are claimed up to ``CLAIM`` at a time, at most one per subject and
        ``lane_width`` per lane, highest priority first, and delivered side by side; each
        is marked done as soon as it went out, together with those that went out
        meanwhile (one UPDATE)."""
        failures: list[str] = []
        attempted = 0
        marks = _DoneMarks(self.engine, self.clock)
        while attempted < limit:
            most = 1 if subject is not None else min(CLAIM, limit - attempted)
            claimed = await self._claim_many(kind, subject, most)
            if not claimed:
                break
            attempted += len(claimed)
            errors = await asyncio.gather(*(self._deliver(item, marks) for item in claimed))
            failures += [error for error in errors if error is not None]
            if subject is not None and failures:
                break  # its later items wait for it: no use trying them now
        return failures

    async def run_forever(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        """The relay: claims due items for every lane with room (highest priority first)
        and keeps up to ``IN_FLIGHT`` deliveries going; each one that ends frees its lane
        and starts the next pass at once. One per process is enough; several (here or in
        other processes) share the work, and the items of one subject still go out in
        order. When ``stop`` is set it gives the deliveries in hand ``STOP_GRACE`` to end."""
        if self._wake is None:
            self._wake = asyncio.Event()
        wake = self._wake
        outage = Outage(log, "the outbox relay")
        marks = _DoneMarks(self.engine, self.clock)
        flights: set[asyncio.Task[str | None]] = set()

        def landed(task: asyncio.Task[str | None]) -> None:
            flights.discard(task)
            wake.set()
            if not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                log.warning("an outbox delivery's outcome was not recorded: %s", exc)

        pause = interval
        while not stop.is_set():
            wake.clear()
            try:
                room = IN_FLIGHT - len(flights)
                if room > 0:
                    for item in await self._claim_many(None, None, room):
                        flight = asyncio.create_task(self._deliver(item, marks))
                        flights.add(flight)
                        flight.add_done_callback(landed)
                outage.passed()
                pause = interval
            except DatabaseUnavailable as exc:
                outage.failed(exc)
            except ConfigError as exc:  # waits for a person: back off, say it once
                self.problems.report(exc, doing="a pass")
                pause = min(pause * 2, MAX_BACKOFF.total_seconds())
            except Exception:
                log.exception("outbox pass failed; trying again")
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
            await asyncio.wait(waits, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()
            if not stop.is_set():
                await asyncio.sleep(MIN_PASS)
        if flights:  # what is in hand ends, or its lease runs out and another relay takes it
            _, unfinished = await asyncio.wait(set(flights), timeout=STOP_GRACE)
            for flight in unfinished:
                flight.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)

    async def _claim(self, kind: str | None, subject: str | None) -> Item | None:
        """Take the first due item (whose subject has no older undone one)."""
        claimed = await self._claim_many(kind, subject, 1)
        return claimed[0] if claimed else None

    async def _claim_many(self, kind: str | None, subject: str | None, most: int) -> list[Item]:
        """Take up to ``most`` due items, each the oldest undone of its subject, lanes
        within their width (not for one subject's kick), highest priority and then
        earliest due first, leasing them to this relay; superseded items are marked done
        first."""
        now = self.clock()
        async with transaction(self.engine, subject="the outbox") as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": CLAIM_LOCK})
            await _collapse(conn, now)
            picked = list(
                (
                    await conn.execute(
                        self._pick(now, kind, subject, most, by_lane=subject is None)
                    )
                ).scalars()
            )
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
                        .values(
                            due_at=now + LEASE,
                            attempts=_items.c.attempts + 1,
                            leased_by=self.owner,
                        )
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

    def _pick(
        self, now: datetime, kind: str | None, subject: str | None, most: int, *, by_lane: bool
    ) -> sa.Select[tuple[int]]:
        """The ids to claim, in the order they should go out. Only the oldest undone item
        of each subject can go (one aggregate over the undone items: the cost grows with
        them, never with their square)."""
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
            due.c.kind.in_(list(self.deliverers)),
        )
        first = (due.c.priority.desc(), due.c.due_at, due.c.id)
        heads_due = due.join(head, head.c.id == due.c.id)
        if not by_lane:
            return (
                sa.select(due.c.id)
                .select_from(heads_due)
                .where(*ready)
                .order_by(*first)
                .limit(most)
            )
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
            .where(ranked.c.place <= self.lane_width - sa.func.coalesce(in_hand.c.n, 0))
            .order_by(ranked.c.priority.desc(), ranked.c.due_at, ranked.c.id)
            .limit(most)
        )

    async def _deliver(self, item: Item, marks: _DoneMarks) -> str | None:
        """Deliver one claimed item, renewing its lease meanwhile, and record how it
        went; its error, if it failed."""
        self._leases.hold(item.id)
        try:
            try:
                await self.deliverers[item.kind](item)
            except PostedNowhere as exc:
                await self._nowhere(item, str(exc))
                return None
            except Exception as exc:  # a chat platform's failure: retried later, never lost
                return await self._failed(item, exc)
            await marks.done(item.id)
            return None
        finally:
            self._leases.drop(item.id)

    async def _nowhere(self, item: Item, why: str) -> None:
        """Close an item that has nowhere to go, saying so (it was not posted)."""
        async with transaction(self.engine, subject="the outbox") as conn:
            await conn.execute(
                _items.update()
                .where(_items.c.id == item.id, _items.c.leased_by == self.owner)
                .values(done_at=self.clock(), last_error=why[:500], leased_by=None)
            )

    async def _failed(self, item: Item, exc: Exception) -> str:
        error = f"{type(exc).__name__}: {exc}"[:500]
        if isinstance(exc, ConfigError):  # the same line every attempt helps nobody
            self.problems.report(exc, doing=f"delivering {item.kind} {item.subject}")
        else:
            log.warning(
                "outbox %s %s failed (attempt %d): %s",
                item.kind,
                item.subject,
                item.attempts,
                error,
            )
        backoff = min(timedelta(seconds=2 ** min(item.attempts, 10)), MAX_BACKOFF)
        async with transaction(self.engine, subject="the outbox") as conn:
            await conn.execute(
                _items.update()
                .where(_items.c.id == item.id, _items.c.leased_by == self.owner)
                .values(due_at=self.clock() + backoff, last_error=error, leased_by=None)
            )
        return error


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


class _Leases:
    """The items a relay is delivering: their leases renewed together, every quarter of
    ``LEASE``, for as long as any is in hand (only while still this relay's)."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.held: set[int] = set()
        self._renewer: asyncio.Task[None] | None = None

    def hold(self, item: int) -> None:
        self.held.add(item)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew())

    def drop(self, item: int) -> None:
        self.held.discard(item)

    async def _renew(self) -> None:
        outbox = self.outbox
        while self.held:
            await asyncio.sleep(LEASE.total_seconds() / 4)
            held = sorted(self.held)
            if not held:
                return
            try:
                async with transaction(outbox.engine, subject="the outbox") as conn:
                    await conn.execute(
                        _items.update()
                        .where(
                            _items.c.id.in_(held),
                            _items.c.leased_by == outbox.owner,
                            _items.c.done_at.is_(None),
                        )
                        .values(due_at=outbox.clock() + LEASE)
                    )
            except DatabaseUnavailable:
                pass  # tried again a quarter later; the lease lasts four of them
            except Exception:
                log.exception("renewing the outbox's leases failed; trying again")


class _DoneMarks:
    """Items delivered side by side are marked done together: one UPDATE for every item
    that went out while the previous UPDATE ran (each still waits for its own)."""

    def __init__(self, engine: AsyncEngine, clock: Callable[[], datetime]) -> None:
        self.engine = engine
        self.clock = clock
        self._pending: list[tuple[int, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def done(self, item: int) -> None:
        marked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, marked))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._mark())
        await marked

    async def _mark(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                async with transaction(self.engine, subject="the outbox") as conn:
                    await conn.execute(
                        _items.update()
                        .where(_items.c.id.in_([item for item, _ in batch]))
                        .values(done_at=self.clock())
                    )
            except BaseException as exc:
                for _, marked in batch:
                    if not marked.done():
                        marked.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for _, marked in batch:
                if not marked.done():
                    marked.set_result(None)
