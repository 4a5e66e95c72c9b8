"""The delivery ledger: act on each platform delivery once, and lose none.

Slack retries a request it did not see acknowledged (``X-Slack-Retry-Num``), Socket Mode
redelivers an envelope it did not see acknowledged, and a nervous person double-clicks.
Each delivery has a key made of what the platform sends (trigger_id; action_ts + user +
action; event_id). A key is first *claimed* by the process that works on it, then marked
*done*:

- a change marks its key done in the same transaction as the change
  (``complete_in``), so the change and "acted on" commit together or not at all;
- a read, or a command that failed, marks it done once its answer is out (``finish``);
  repeating a read after a crash is harmless.

A claim's owner refreshes it while it works (``heartbeat``). A claim nobody refreshed
for ``stale_after`` (its owner died) is taken over by exactly one later caller, and if
the old owner was only slow, its change finds the claim no longer its own and rolls back.
So a redelivery after a crash acts exactly once. Several replicas share the ledger.

A command or click is written down with what it asked (``request``: who, what, and where
to answer) before the platform gets its acknowledgement, because Slack and Discord never
send again what they saw acknowledged. Its claim stays held until the answer is out
(``finish`` sets ``answered_at``); a claim whose owner died before that is an *orphan*,
and ``adopt_orphans`` hands it to exactly one live process, which finishes the work (a
change still acts once: ``complete_in``) or, when the change had committed, says what it
did. Each adoption is counted in the row, in the statement that adopts it: a delivery
whose process died ``MAX_ADOPTIONS`` times after the first one (a command that kills the
process carrying it out, say by running it out of memory) is not run again but answered
that it failed and was not retried (``Orphan.given_up``).

Methods without a connection are their own transaction; ``complete_in`` runs in the
caller's. The same claims serve work that must be done once but can fail half-way (a
plan's message: ``release`` gives the claim back so the next caller tries again).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.db import process_owner, transaction
from services.db.batched import Batched
from services.db.tables import Delivery
from services.errors import ConcurrentChange, DatabaseUnavailable
from services.ledger.acks import ThreadedAcks

_deliveries = cast(sa.Table, Delivery.__table__)
KEEP = timedelta(days=2)  # far beyond any platform's retry window
# A delivery's claim unrefreshed this long: its owner is gone. QUEUEBOT_CLAIM_STALE_SECONDS
# sets it per process (down to 5 s: the tests that kill processes wait it out).
STALE = timedelta(seconds=10)
HEARTBEAT = 2.0  # seconds between refreshes of a claim in progress
# Times an acknowledged delivery whose owner died is run again by the process adopting
# it. The adoption after these is the last: it answers that the work failed while being
# carried out and was not retried, so a command that kills its process (it runs out of
# memory) cannot take down every replica in turn, forever.
MAX_ADOPTIONS = 3
CLAIMED, DONE = "claimed", "done"
KEY_LENGTH = 200
ACKED_AT = "acked_at"  # stamped into a written-down request by the ledger
ANSWERED_KEPT = 10_000  # answered keys the database could not be told of, kept at most


@dataclass(frozen=True)
class Claim:
    """A key held by one claim: ``owner`` names the process and this claim (two claims of
    one process are two owners), ``token`` is when it was claimed."""

    key: str
    owner: str
    token: datetime


@dataclass(frozen=True)
class Orphan:
    """An acknowledged delivery whose owner died before answering, now this process's:
    ``state`` is ``claimed`` (the work may not have happened) or ``done`` (a change
    committed; ``outcome`` says what it did). ``adoptions`` counts this adoption and
    those before it: each followed the death of the process that held the delivery."""

    claim: Claim
    state: str
    request: dict[str, Any]
    outcome: str | None
    adoptions: int = 1

    @property
    def given_up(self) -> bool:
        """Work that never finished, whose process died more often than it may be run
        again: it is answered that it was not retried, and not run. (A change that had
        committed is answered with what it did, however often.)"""
        return self.state == CLAIMED and self.adoptions > MAX_ADOPTIONS

    @property
    def acked_at(self) -> datetime | None:
        """When the delivery was written down, just before its ack (the ledger stamps
        it): whether the platform still takes answers at the place it named."""
        try:
            when = datetime.fromisoformat(str(self.request.get(ACKED_AT)))
        except ValueError:
            return None
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class DeliveryLedger:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        owner: str | None = None,
        stale_after: timedelta = STALE,
        acks: ThreadedAcks | None = None,
    ) -> None:
        self.engine = engine
        self.acks = acks  # writes deliveries down before their ack (PostgreSQL)
        self.clock = clock
        self.owner = owner or process_owner()
        self.stale_after = stale_after
        # keys whose answer went out while the database could not be told (``finish``)
        self._answered: set[str] = set()
        # answers that went out side by side are marked answered in one transaction
        self._finishing: Batched[Claim] = Batched(self._finish_all)

    async def claim(
        self,
        key: str,
        *,
        stale_after: timedelta | None = None,
        request: dict[str, Any] | None = None,
    ) -> Claim | None:
        """Claim ``key`` for this process. None when it is done already, or another owner
        holds a claim it refreshed within ``stale_after`` (default: the ledger's); a
        staler claim is taken over by exactly one caller. Staleness is judged by the
        caller's clock: replicas' clocks must agree to well within ``stale_after``.

        ``request`` (JSON) writes down what the delivery asks and where to answer it: an
        adapter claims with it before acknowledging, so that a process that dies after
        the acknowledgement leaves an orphan another finishes (``adopt_orphans``)."""
        key = key[:KEY_LENGTH]
        stale_after = self.stale_after if stale_after is None else stale_after
        now = self.clock()
        if request is not None:
            request = request | {ACKED_AT: now.isoformat()}
        owner = f"{self.owner}/{secrets.token_hex(4)}"[:64]
        # with a request, an acknowledgement waits for this write: it goes first
        first = request is not None
        async with transaction(self.engine, subject="the delivery ledger", first=first) as conn:
            insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
            inserted = await conn.execute(
                insert(_deliveries)
                .values(
                    key=key,
                    seen_at=now,
                    state=CLAIMED,
                    owner=owner,
                    request=sa.null() if request is None else request,  # not JSON null
                )
                .on_conflict_do_nothing()
                .returning(_deliveries.c.key)  # not rowcount: psycopg says -1 here
            )
            if inserted.first() is not None:
                return Claim(key, owner, now)
            taken = await conn.execute(
                _deliveries.update()
                .where(
                    _deliveries.c.key == key,
                    _deliveries.c.state == CLAIMED,
                    _deliveries.c.seen_at < now - stale_after,
                )
                .values(
                    seen_at=now,
                    owner=owner,
                    **({} if request is None else {"request": request}),
                )
                .returning(_deliveries.c.key)
            )
            return Claim(key, owner, now) if taken.first() is not None else None

    async def acknowledge(self, key: str, request: dict[str, Any]) -> Claim | None:
        """``claim(key, request=request)``, for a delivery about to be acknowledged. With
        ``acks`` (PostgreSQL) the row is written by a thread of its own, together with
        those of every delivery arriving meanwhile (one INSERT, one commit), so the ack
        waits for no turn of the busy event loop but the one that wakes it. A key already
        in the ledger (a redelivery) is claimed as ``claim`` does."""
        if self.acks is None:
            return await self.claim(key, request=request)
        key = key[:KEY_LENGTH]
        owner = f"{self.owner}/{secrets.token_hex(4)}"[:64]
        now = self.clock()
        if await self.acks.write(key, owner, request | {ACKED_AT: now.isoformat()}, now):
            return Claim(key, owner, now)
        return await self.claim(key, request=request)

    async def heartbeat(self, claim: Claim) -> bool:
        """Refresh a claim in progress, until its answer is out (a change marks its key
        done before answering); False when it is no longer this owner's."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            refreshed = await conn.execute(
                _deliveries.update()
                .where(*_owned(claim), _deliveries.c.answered_at.is_(None))
                .values(seen_at=self.clock())
                .returning(_deliveries.c.key)
            )
            return refreshed.first() is not None

    @asynccontextmanager
    async def kept_fresh(self, claim: Claim, *, every: float = HEARTBEAT) -> AsyncIterator[None]:
        """Refresh ``claim`` every ``every`` seconds while the block runs (a post that
        waits out a 429), so only a dead holder's claim goes stale.

        When the block ends the beats are told to stop and awaited, not cancelled: a
        cancel landing in the middle of a heartbeat's statement left its pooled
        connection to be cleaned up outside SQLAlchemy's greenlet, which failed and
        logged tracebacks (seen under load). A beat under way finishes first (one short
        UPDATE, within the database's own bounds)."""
        done = asyncio.Event()

        async def beat() -> None:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(every):
                        await done.wait()
                if done.is_set():
                    return
                with contextlib.suppress(DatabaseUnavailable):  # the next beat tries again
                    if not await self.heartbeat(claim):
                        return  # taken over: no longer ours to refresh

        beating = asyncio.create_task(beat())
        try:
            yield
        finally:
            done.set()
            try:
                await asyncio.shield(beating)
            except asyncio.CancelledError:  # this task itself is being cancelled
                beating.cancel()
                raise

    async def finish(self, claim: Claim) -> None:
        """The answer is out (or cannot go anywhere): mark the key done and answered,
        unless someone took the claim over. When the database cannot be told, this
        process remembers the key: its claim goes stale unrefreshed, and when this
        process adopts it (``adopt_orphans``) it marks it answered instead of answering
        it again."""
        try:
            await self._finishing.add(claim)  # with the others finished meanwhile
        except DatabaseUnavailable:
            if len(self._answered) < ANSWERED_KEPT:
                self._answered.add(claim.key)
            raise

    async def _finish_all(self, claims: list[Claim]) -> None:
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            await _answered(conn, claims, self.clock())

    async def adopt_orphans(self, *, prefixes: tuple[str, ...], limit: int = 20) -> list[Orphan]:
        """Take over acknowledged deliveries (keys starting with one of ``prefixes``)
        whose owner stopped refreshing them before their answer went out (it died): each
        goes to exactly one caller, oldest first. Each adoption is counted in the row by
        the same statement, so a process killed right after adopting still counted it.

        A delivery adopted before (its adopter died too) is adopted alone: when one of
        several adopted together kills the process carrying them out, the others die with
        it once, and are then each run by itself, never again beside the one that kills."""
        now = self.clock()
        owner = f"{self.owner}/{secrets.token_hex(4)}"[:64]
        cutoff = now - self.stale_after
        stale = (
            _deliveries.c.answered_at.is_(None),
            _deliveries.c.request.is_not(None),
            _deliveries.c.seen_at < cutoff,
            sa.or_(*(_deliveries.c.key.startswith(p, autoescape=True) for p in prefixes)),
        )
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            orphans = await self._adopt(
                conn, (*stale, _deliveries.c.adoptions > 0), 1, now, owner
            ) or await self._adopt(conn, (*stale, _deliveries.c.adoptions == 0), limit, now, owner)
            # answered by this process while the database was away: only recorded now
            answered = {o.claim.key: o.claim for o in orphans if o.claim.key in self._answered}
            await _answered(conn, list(answered.values()), now)
        self._answered.difference_update(answered)
        return [o for o in orphans if o.claim.key not in answered]

    @staticmethod
    async def _adopt(
        conn: AsyncConnection,
        where: tuple[sa.ColumnElement[bool], ...],
        limit: int,
        now: datetime,
        owner: str,
    ) -> list[Orphan]:
        candidates = (
            sa.select(_deliveries.c.key).where(*where).order_by(_deliveries.c.seen_at).limit(limit)
        )
        if conn.dialect.name == "postgresql":
            candidates = candidates.with_for_update(skip_locked=True)
        # picked once (a CTE, materialized): PostgreSQL may run a subquery in the WHERE
        # again for each row it updates, and the rows it just adopted no longer match,
        # so a LIMIT 1 adopted two
        picked = candidates.cte("picked").prefix_with("MATERIALIZED", dialect="postgresql")
        taken = await conn.execute(
            _deliveries.update()
            .where(_deliveries.c.key.in_(sa.select(picked.c.key)), *where)
            .values(seen_at=now, owner=owner, adoptions=_deliveries.c.adoptions + 1)
            .returning(
                _deliveries.c.key,
                _deliveries.c.state,
                _deliveries.c.request,
                _deliveries.c.outcome,
                _deliveries.c.adoptions,
            )
        )
        return [
            Orphan(
                Claim(row.key, owner, now),
                row.state,
                dict(row.request),
                row.outcome,
                int(row.adoptions),
            )
            for row in taken
        ]

    async def release(self, claim: Claim) -> None:
        """Give a claim back so that the next caller may try the work again; only this
        claim (one taken over since then is someone else's)."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            await conn.execute(
                _deliveries.delete().where(
                    _deliveries.c.key == claim.key,
                    _deliveries.c.owner == claim.owner,
                    _deliveries.c.state == CLAIMED,
                )
            )

    def close(self) -> None:
        """Stop the thread that writes deliveries down, if one runs."""
        if self.acks is not None:
            self.acks.close()

    async def forget_older_than(self, age: timedelta = KEEP) -> int:
        """Drop keys older than any platform redelivers (claims long abandoned too)."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            return await forget(conn, before=self.clock() - age)


async def complete_in(
    conn: AsyncConnection, claim: Claim, *, now: datetime, outcome: str | None = None
) -> None:
    """Inside a change's transaction: the delivery that asked for it is done, together
    with the change. When the claim is no longer this owner's (taken over by another
    process while this one was stalled) the change must not happen: ``ConcurrentChange``
    rolls it back, and the new owner acts instead. ``outcome`` says in a few words what
    the change did ("CR-7 requested"), for the answer given if this process dies before
    its own answer is out."""
    done = await conn.execute(
        _deliveries.update()
        .where(*_held(claim))
        .values(state=DONE, done_at=now, outcome=None if outcome is None else outcome[:200])
        .returning(_deliveries.c.key)
    )
    if done.first() is None:
        raise ConcurrentChange(subject="this delivery")


async def note_outcome(conn: AsyncConnection, claim: Claim | None, outcome: str) -> None:
    """Inside a change's transaction, once the change knows what it did: the few words
    (``CR-7 requested``) a restarted process says if this one dies before answering."""
    if claim is not None:
        await conn.execute(_deliveries.update().where(*_owned(claim)).values(outcome=outcome[:200]))


def done_before(cutoff: datetime) -> sa.ColumnElement[bool]:
    """The delivery keys that may be forgotten: done and last seen before ``cutoff``, but
    for an acknowledged command still waiting for its answer (a restarted process answers
    it). serve's hourly job and ``queuebot db prune`` both forget by this rule."""
    return sa.and_(
        _deliveries.c.state == DONE,
        _deliveries.c.seen_at < cutoff,
        sa.or_(_deliveries.c.request.is_(None), _deliveries.c.answered_at.is_not(None)),
    )


async def forget(conn: AsyncConnection, *, before: datetime) -> int:
    result = await conn.execute(_deliveries.delete().where(done_before(before)))
    return int(result.rowcount)


async def _answered(conn: AsyncConnection, claims: list[Claim], now: datetime) -> None:
    """Mark each claim's key done and answered, unless someone took the claim over."""
    for claim in claims:
        await conn.execute(
            _deliveries.update()
            .where(*_owned(claim))
            .values(
                state=DONE,
                done_at=sa.func.coalesce(_deliveries.c.done_at, now),
                answered_at=now,
            )
        )


def _owned(claim: Claim) -> tuple[sa.ColumnElement[bool], ...]:
    return (_deliveries.c.key == claim.key, _deliveries.c.owner == claim.owner)


def _held(claim: Claim) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        _deliveries.c.key == claim.key,
        _deliveries.c.owner == claim.owner,
        _deliveries.c.state == CLAIMED,
    )
