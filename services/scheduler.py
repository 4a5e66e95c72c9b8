"""The durable scheduler: due items live in ``qb_schedule``, survive restarts and
run exactly once across replicas.

An item is claimed with ``FOR UPDATE SKIP LOCKED`` (SQLite: the write lock), deleted and
handled in one transaction: the handler's changes and the item's completion commit
together, and a crash rolls both back, so another replica (or the restart) runs it again.
Work that leaves the database (chat posts) is returned as follow-ups and run after the
commit. There is at most one item per (kind, subject); scheduling again moves it.

Kinds registered with ``register_batch`` (an incident's reminders and deadlines, which
come due by the thousand) are claimed up to ``BATCH`` at a time and handled in one
transaction by a handler that does for all of them what it would do for each, in a few
statements. Exactly once still holds: the items' deletion and their handler's changes
commit together. A batch that fails is rolled back whole and its items are run again one
per transaction, so a bad item holds back (and retries) only itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.db import Outage, transaction
from services.db.tables import ScheduledItem
from services.errors import ConcurrentChange, ConfigError, DatabaseUnavailable
from services.known_problems import KnownProblems

log = logging.getLogger("queuebot.scheduler")
_items = cast(sa.Table, ScheduledItem.__table__)

FollowUp = Callable[[], Awaitable[None]]
Handler = Callable[[AsyncConnection, str, datetime], Awaitable[list[FollowUp]]]


class Due(NamedTuple):
    """A claimed item, as a batch handler gets it."""

    kind: str
    subject: str


BatchHandler = Callable[[AsyncConnection, Sequence[Due], datetime], Awaitable[list[FollowUp]]]
# What a domain makes sure of when the scheduler starts (its periodic items exist), in the
# start's one transaction; a no-op when another replica did it (``ensure``).
Seed = Callable[[AsyncConnection, datetime], Awaitable[None]]


class SharedDeps(Protocol):
    """What every domain's ``register(scheduler, outbox, deps)`` may read from ``deps``
    (``services/*/jobs.py``); each domain's ``Deps`` protocol adds what else it needs, and
    the one object ``bot/bootstrap.py`` builds (``bot/jobs.py``'s ``JobDeps``) has it all."""

    @property
    def one_database(self) -> bool:
        """The queues' tables and queuebot's share one database: only there do the periodic
        jobs and the plans' ticks run."""
        ...


MAX_BACKOFF = timedelta(minutes=5)
MIN_PAUSE = 0.02  # seconds between passes at least
PASS = 100  # items one pass of run_forever runs at most; after a full one it goes straight on
BATCH = 100  # items of the batch kinds one transaction claims at most


class PostsDeferred(Exception):
    """Chat posts of a committed change did not go out yet; they stay in the outbox and
    are retried until they do."""


@dataclass(frozen=True)
class PostFailure:
    """A follow-up (a chat post) that failed after its change was committed."""

    what: str
    error: str


async def run_follow_ups(follow_ups: Sequence[FollowUp], *, what: str) -> tuple[PostFailure, ...]:
    """Run the work that follows a commit (chat posts). A failure never undoes the
    committed change: it is logged and returned, so the person can be told."""
    failures: list[PostFailure] = []
    for follow_up in follow_ups:
        try:
            await follow_up()
        except (PostsDeferred, DatabaseUnavailable) as exc:  # kept; one line, no traceback
            log.warning("chat posts after the %s are deferred: %s", what, exc)
            failures.append(PostFailure(what, str(exc)[:300]))
        except Exception as exc:  # a chat post failing must not undo committed work
            log.exception("a chat post after the %s failed", what)
            failures.append(PostFailure(what, f"{type(exc).__name__}: {exc}"[:300]))
    return tuple(failures)


async def schedule(
    conn: AsyncConnection,
    *,
    kind: str,
    subject: str,
    due_at: datetime,
    created_at: datetime,
    keep_earlier: bool = False,
) -> None:
    """Make (kind, subject) due at ``due_at``, inside the caller's transaction."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = insert(_items).values(
        kind=kind, subject=subject, due_at=due_at, attempts=0, created_at=created_at
    )
    new_due: sa.ColumnElement[datetime] = statement.excluded.due_at
    if keep_earlier:  # least() on PostgreSQL, the two-argument min() on SQLite
        earlier = sa.func.least if conn.dialect.name == "postgresql" else sa.func.min
        new_due = earlier(_items.c.due_at, statement.excluded.due_at)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[_items.c.kind, _items.c.subject], set_={"due_at": new_due}
        )
    )


async def ensure(conn: AsyncConnection, *, kind: str, subject: str, due_at: datetime) -> None:
    """Schedule (kind, subject) unless it is already scheduled."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    await conn.execute(
        insert(_items)
        .values(
            kind=kind,
            subject=subject,
            due_at=due_at,
            attempts=0,
            created_at=due_at,
        )
        .on_conflict_do_nothing()
    )


async def unschedule(conn: AsyncConnection, *, kind: str, subject: str) -> None:
    await conn.execute(_items.delete().where(_items.c.kind == kind, _items.c.subject == subject))


class Scheduler:
    def __init__(
        self, *, engine: AsyncEngine, clock: Callable[[], datetime], interval: float = 1.0
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.interval = interval
        self.handlers: dict[str, Handler] = {}
        self.batches: dict[str, BatchHandler] = {}
        self.seeds: list[Seed] = []
        self.problems = KnownProblems(log, "the scheduler")

    def register(self, kind: str, handler: Handler) -> None:
        self.handlers[kind] = handler
        self.batches.pop(kind, None)

    def register_batch(self, kinds: Sequence[str], handler: BatchHandler) -> None:
        """``handler`` fires many due items of ``kinds`` in one transaction: it gets them
        in due order and must do for each what it would do for it alone, inside the
        transaction only (what leaves the database goes in its follow-ups), since a
        failed batch is run again item by item."""

        def alone(kind: str) -> Handler:
            async def run(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
                return await handler(conn, [Due(kind, subject)], now)

            return run

        for kind in kinds:
            self.handlers[kind] = alone(kind)
            self.batches[kind] = handler

    def on_start(self, seed: Seed) -> None:
        """``seed`` runs at each start (``seed()``), before the first item is claimed."""
        self.seeds.append(seed)

    async def seed(self) -> None:
        """What every registered domain makes sure of at start, in one transaction."""
        if not self.seeds:
            return
        now = self.clock()
        async with self.engine.begin() as conn:
            for seed in self.seeds:
                await seed(conn, now)

    async def run_one(self) -> bool:
        """Claim and run one due item; False when nothing is due."""
        return await self._run_next(1) > 0

    async def _run_next(self, limit: int, only: int | None = None) -> int:
        """Claim the earliest due item (the one with id ``only``, where given) and run it
        in a transaction of its own; when it is of a batch kind, claim the next due items
        of the batch kinds with it (``limit`` in all) and fire them together. Return how
        many were claimed: 0 when none was due (or free)."""
        now = self.clock()
        claimed: list[tuple[int, str, str]] = []
        follow_ups: list[FollowUp] = []
        first = (
            sa.select(_items.c.id, _items.c.kind, _items.c.subject)
            .where(_items.c.due_at <= now, _items.c.kind.in_(list(self.handlers)))
            .order_by(_items.c.due_at, _items.c.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        if only is not None:
            first = first.where(_items.c.id == only)
        try:
            async with transaction(self.engine, subject="the scheduler") as conn:
                row = (await conn.execute(first)).first()
                if row is None:
                    return 0
                claimed = [(int(row[0]), str(row[1]), str(row[2]))]
                batch = self.batches.get(claimed[0][1])
                if batch is not None and limit > 1 and only is None:
                    more = await conn.execute(
                        sa.select(_items.c.id, _items.c.kind, _items.c.subject)
                        .where(
                            _items.c.due_at <= now,
                            _items.c.kind.in_(list(self.batches)),
                            _items.c.id != claimed[0][0],
                        )
                        .order_by(_items.c.due_at, _items.c.id)
                        .limit(limit - 1)
                        .with_for_update(skip_locked=True)
                    )
                    claimed += [(int(r[0]), str(r[1]), str(r[2])) for r in more]
                await conn.execute(_items.delete().where(_items.c.id.in_([c[0] for c in claimed])))
                if batch is None:
                    follow_ups = await self.handlers[claimed[0][1]](conn, claimed[0][2], now)
                else:
                    by_handler: dict[BatchHandler, list[Due]] = {}
                    for _, kind, subject in claimed:  # in due order, each handler its items
                        by_handler.setdefault(self.batches[kind], []).append(Due(kind, subject))
                    for handler, items in by_handler.items():
                        follow_ups += await handler(conn, items, now)
        except DatabaseUnavailable:
            raise  # rolled back: the items are still due, and run once the database is back
        except Exception as exc:
            if not claimed:
                raise
            if len(claimed) > 1:
                # rolled back whole: each item on its own, so only a bad one is held back
                log.warning(
                    "a batch of %d scheduled items failed (%s: %s); running them one by one",
                    len(claimed),
                    type(exc).__name__,
                    str(exc)[:200],
                )
                for item_id, _, _ in claimed:
                    await self._run_next(1, only=item_id)
                return len(claimed)
            (item,) = claimed
            if isinstance(exc, ConcurrentChange):
                # rolled back beside a concurrent transaction (a deadlock broken, say): the
                # item is still due and runs on the next pass
                log.info("scheduled %s ran into a concurrent change; it runs again", item)
                return 1
            if isinstance(exc, ConfigError):  # a queue's setup, not a bug: one line at most
                self.problems.report(exc, doing=f"scheduled {item[1]} {item[2]}")
            else:
                log.exception("scheduled %s %s failed; it will be retried", item[1], item[2])
            await self._retry_later(item, now, exc)
            return 1
        what = (
            f"scheduled {claimed[0][1]} {claimed[0][2]}"
            if len(claimed) == 1
            else f"{len(claimed)} scheduled items"
        )
        await run_follow_ups(follow_ups, what=what)
        return len(claimed)

    async def _retry_later(
        self, claimed: tuple[int, str, str], now: datetime, exc: Exception
    ) -> None:
        item_id = claimed[0]
        async with transaction(self.engine, subject="the scheduler") as conn:
            current = (
                await conn.execute(sa.select(_items.c.attempts).where(_items.c.id == item_id))
            ).scalar_one_or_none()
            if current is None:
                return
            backoff = min(timedelta(seconds=2 ** min(current + 1, 10)), MAX_BACKOFF)
            await conn.execute(
                _items.update()
                .where(_items.c.id == item_id)
                .values(
                    attempts=current + 1,
                    last_error=f"{type(exc).__name__}: {exc}"[:2000],
                    due_at=now + backoff,
                )
            )

    async def run_due(self, limit: int = 1000) -> int:
        """Run every item due now (up to ``limit``), the earliest first; return how many
        ran."""
        ran = 0
        while ran < limit:
            claimed = await self._run_next(min(BATCH, limit - ran))
            if not claimed:
                break
            ran += claimed
        return ran

    async def next_due_in(self) -> float | None:
        """Seconds until the earliest item comes due (0 when one is due now)."""
        async with transaction(self.engine, subject="the scheduler") as conn:
            earliest = (
                await conn.execute(
                    sa.select(sa.func.min(_items.c.due_at)).where(
                        _items.c.kind.in_(list(self.handlers))
                    )
                )
            ).scalar_one_or_none()
        if earliest is None:
            return None
        if earliest.tzinfo is None:  # SQLite gives it back without its zone
            earliest = earliest.replace(tzinfo=self.clock().tzinfo)
        return float(max(0.0, (earliest - self.clock()).total_seconds()))

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Run what is due, then sleep until the next item comes due (at most
        ``interval``, so items another replica schedules are seen that soon)."""
        outage = Outage(log, "the scheduler")
        pause = self.interval
        while not stop.is_set():
            try:
                ran = await self.run_due(limit=PASS)
                outage.passed()
                pause = self.interval
                if ran == PASS:
                    pause = 0.0  # more are due: a backlog is worked off without a rest
                else:
                    until = await self.next_due_in()
                    if until is not None:
                        # a floor: an item due now but held by another replica
                        pause = min(self.interval, max(until, MIN_PAUSE))
            except DatabaseUnavailable as exc:
                outage.failed(exc)
            except ConfigError as exc:  # waits for a person: back off, say it once
                self.problems.report(exc, doing="a pass")
                pause = min(pause * 2, MAX_BACKOFF.total_seconds())
            except Exception:
                log.exception("scheduler pass failed; trying again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=pause)
