"""The transactional outbox: chat posts a change makes are written in the change's own
transaction and delivered after it, retried until they go out.

``add`` writes an item inside the caller's transaction, so a post exists exactly when the
change it reports committed. The relay then delivers items: it claims the oldest due items,
at most one per subject (``FOR UPDATE SKIP LOCKED``; SQLite: the write lock), by pushing
their due time one lease ahead, commits, delivers them side by side outside any
transaction, and marks each done (those that went out together in one UPDATE), or due
again after a backoff with the error kept. Items of one subject go out in the order they
were written: an item waits while an older one of its subject is undone. A relay that dies
mid-delivery leaves the item to come due again when its lease ends, so delivery is at least
once: an update of a message is idempotent; a thread post delivered just before a crash can
show twice (never zero times).

After a commit, ``kick`` delivers the subject's items at once, so posts are not late by a
relay's poll; the relay loop (``run_forever``) picks up everything else.
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
from services.models import OutboxItem
from services.scheduler import FollowUp, PostsDeferred

log = logging.getLogger("queuebot.outbox")
_items = cast(sa.Table, OutboxItem.__table__)
LEASE = timedelta(minutes=2)  # far beyond one delivery, even one waiting out a 429
MAX_BACKOFF = timedelta(minutes=5)
HANDOVER = 10.0  # seconds a kick waits for another relay's delivery of its subject
HANDOVER_POLL = 0.05
CLAIM = 20  # items a relay claims at once (delivered side by side, well within a lease)
KEEP_DONE = timedelta(days=2)


@dataclass(frozen=True)
class Item:
    id: int
    kind: str
    subject: str
    payload: dict[str, Any]
    attempts: int


Deliver = Callable[[Item], Awaitable[None]]


async def add(
    conn: AsyncConnection, *, kind: str, subject: str, payload: dict[str, Any], now: datetime
) -> None:
    """A post to make once the caller's transaction commits (and only if it does)."""
    await conn.execute(
        _items.insert().values(
            kind=kind, subject=subject, payload=payload, created_at=now, due_at=now, attempts=0
        )
    )


async def add_many(
    conn: AsyncConnection, *, kind: str, items: list[dict[str, Any]], now: datetime
) -> None:
    """Several posts (each ``{"subject": ..., "payload": ...}``) in one statement, in the
    order given (their ids keep that order, so each subject's posts go out in it)."""
    await conn.execute(
        _items.insert(),
        [
            {
                "kind": kind,
                "subject": item["subject"],
                "payload": item["payload"],
                "created_at": now,
                "due_at": now,
                "attempts": 0,
            }
            for item in items
        ],
    )


async def forget_done(conn: AsyncConnection, *, before: datetime) -> None:
    """Drop items delivered before ``before`` (a step of a housekeeping job)."""
    await conn.execute(_items.delete().where(_items.c.done_at < before))


class Outbox:
    """Delivers the items of the kinds registered with it."""

    def __init__(self, *, engine: AsyncEngine, clock: Callable[[], datetime]) -> None:
        self.engine = engine
        self.clock = clock
        self.deliverers: dict[str, Deliver] = {}
        self.problems = KnownProblems(log, "the outbox relay")
        self._wake: asyncio.Event | None = None
        self._elsewhere: Callable[[], None] | None = None

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

        Items are claimed up to ``CLAIM`` at a time, at most one per subject (a subject's
        next item waits until the one before it is done), and delivered side by side: a
        channel waiting out its pace holds only its own. Each is marked done as soon as
        it went out, together with those that went out meanwhile (one UPDATE)."""
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
        """One relay; several may run at once (in one process or many): each claims its
        own items, and the items of one subject still go out in order."""
        if self._wake is None:
            self._wake = asyncio.Event()
        wake = self._wake
        outage = Outage(log, "the outbox relay")
        pause = interval
        while not stop.is_set():
            wake.clear()
            try:
                await self.run_due()
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

    async def _claim(self, kind: str | None, subject: str | None) -> Item | None:
        """Take the oldest due item (whose subject has no older undone one)."""
        claimed = await self._claim_many(kind, subject, 1)
        return claimed[0] if claimed else None

    async def _claim_many(self, kind: str | None, subject: str | None, most: int) -> list[Item]:
        """Take the ``most`` oldest due items whose subjects have no older undone item
        (so at most one per subject): one UPDATE that pushes their due time a lease
        ahead, over a ``FOR UPDATE SKIP LOCKED`` pick."""
        now = self.clock()
        due = _items.alias("due")  # the candidates, apart from the row updated
        older = _items.alias("older")
        waiting_for_older = (
            sa.select(older.c.id)
            .where(
                older.c.kind == due.c.kind,
                older.c.subject == due.c.subject,
                older.c.done_at.is_(None),
                older.c.id < due.c.id,
            )
            .exists()
        )
        pick = (
            sa.select(due.c.id)
            .where(
                due.c.done_at.is_(None),
                due.c.due_at <= now,
                due.c.kind.in_(list(self.deliverers)),
                ~waiting_for_older,
            )
            .order_by(due.c.due_at, due.c.id)
            .limit(most)
            .with_for_update(skip_locked=True)
        )
        if kind is not None:
            pick = pick.where(due.c.kind == kind)
        if subject is not None:
            pick = pick.where(due.c.subject == subject)
        async with transaction(self.engine, subject="the outbox") as conn:
            rows = (
                (
                    await conn.execute(
                        _items.update()
                        .where(_items.c.id.in_(pick.scalar_subquery()))
                        .values(due_at=now + LEASE, attempts=_items.c.attempts + 1)
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
        return sorted(items, key=lambda item: item.id)

    async def _deliver(self, item: Item, marks: _DoneMarks) -> str | None:
        """Deliver one claimed item and record how it went; its error, if it failed."""
        try:
            await self.deliverers[item.kind](item)
        except Exception as exc:  # a chat platform's failure: retried later, never lost
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
                    .where(_items.c.id == item.id)
                    .values(due_at=self.clock() + backoff, last_error=error)
                )
            return error
        await marks.done(item.id)
        return None


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
