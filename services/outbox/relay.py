"""The relay: claims due items, delivers them side by side with their leases renewed,
and records how each went (done, posted nowhere, or due again after a backoff with the
error kept). Deliveries run outside any transaction; each outcome is its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import Outage, process_owner, transaction
from services.db.batched import Batched
from services.db.on_commit import FollowUp, PostsDeferred
from services.errors import ConfigError, DatabaseUnavailable
from services.known_problems import KnownProblems
from services.outbox import store
from services.outbox.model import EVERYWHERE, Item, PostedNowhere, Poster, Reach

log = logging.getLogger("queuebot.outbox")
MAX_BACKOFF = timedelta(minutes=5)
HANDOVER = 10.0  # seconds a kick waits for another relay's posting of its subject
HANDOVER_POLL = 0.05
CLAIM = 20  # items ``run_due`` claims at once (delivered side by side)
IN_FLIGHT = 64  # deliveries ``run_forever`` keeps going at once, across lanes
LANE_WIDTH = 1  # items of one lane in hand at once
STOP_GRACE = 5.0  # seconds a stopping relay gives the deliveries in hand
MIN_PASS = 0.02  # seconds between a relay's passes at least: deliveries that end together
# free their lanes for one claim


class Outbox:
    """Delivers the items of the kinds registered with it, those without a destination and
    those whose destination its process reaches (``reach``: by default every one)."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        lane_width: int = LANE_WIDTH,
        reach: Reach = EVERYWHERE,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.lane_width = max(1, lane_width)
        self.reach = reach
        self.owner = f"outbox:{process_owner()}"[:64]
        self.posters: dict[str, Poster] = {}
        # (kind, subject): the newest item of each is kept when done items are forgotten
        self.kept_newest: list[tuple[str, str]] = []
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

    def register(self, kind: str, deliver: Poster) -> None:
        self.posters[kind] = deliver

    def keep_newest(self, kind: str, subject: str) -> None:
        """Forgetting done items (``services/outbox/jobs.py``) keeps the newest item of
        (kind, subject): a domain reads it back (the audit anchor job, the head it last
        posted)."""
        self.kept_newest.append((kind, subject))

    def kick(self, kind: str, subject: str) -> FollowUp:
        """After a commit: deliver the subject's due items now. Raises ``PostsDeferred``
        when one failed (it stays in the outbox and is retried).

        A relay (here, or in serve's worker, woken by the same commit) may have claimed
        one of them first: its posting is waited for (``HANDOVER`` at most), and the
        subject's later items delivered here, so the caller's reply still comes after
        the posts it reports, and "still on its way" only when it really is. Items for a
        destination this process does not reach (a Slack channel, from the console; a
        console session, from serve) are left at once to the process that does: its reply
        is shown elsewhere than those posts, so nothing here waits for them."""

        async def post_now() -> None:
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

        return post_now

    async def _held_back(self, kind: str, subject: str) -> tuple[str, bool] | None:
        """Why the subject still has undone items this relay could deliver, if it has: the
        oldest one's error, and whether another relay is delivering it (it never failed:
        it is leased)."""
        async with transaction(self.engine, subject="the outbox") as conn:
            oldest = await store.oldest_undone(conn, kind, subject)
        if oldest is None or not self.reach.covers(oldest[1]):
            return None
        error = oldest[0]
        if error:
            return error, False
        return "an earlier post is still on its way", True

    async def run_due(
        self, *, limit: int = 100, kind: str | None = None, subject: str | None = None
    ) -> list[str]:
        """Poster due items (of one subject, when given); the errors of those that failed.

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
            errors = await asyncio.gather(*(self._post(item, marks) for item in claimed))
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
                log.warning("an outbox post's outcome was not recorded: %s", exc)

        pause = interval
        while not stop.is_set():
            wake.clear()
            try:
                room = IN_FLIGHT - len(flights)
                if room > 0:
                    for item in await self._claim_many(None, None, room):
                        flight = asyncio.create_task(self._post(item, marks))
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
            return await store.claim(
                conn,
                now=now,
                owner=self.owner,
                kinds=list(self.posters),
                kind=kind,
                subject=subject,
                most=most,
                lane_width=self.lane_width,
                reach=self.reach,
            )

    async def _post(self, item: Item, marks: _DoneMarks) -> str | None:
        """Poster one claimed item, renewing its lease meanwhile, and record how it
        went; its error, if it failed."""
        self._leases.hold(item.id)
        try:
            try:
                await self.posters[item.kind](item)
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
            await store.close_nowhere(conn, item.id, owner=self.owner, now=self.clock(), why=why)

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
            await store.retry_later(
                conn, item.id, owner=self.owner, due_at=self.clock() + backoff, error=error
            )
        return error


class _Leases:
    """The items a relay is delivering: their leases renewed together, every quarter of
    ``store.LEASE``, for as long as any is in hand (only while still this relay's)."""

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
            await asyncio.sleep(store.LEASE.total_seconds() / 4)
            held = sorted(self.held)
            if not held:
                return
            try:
                async with transaction(outbox.engine, subject="the outbox") as conn:
                    await store.renew(conn, held, owner=outbox.owner, now=outbox.clock())
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
        self._marks: Batched[int] = Batched(self._mark)

    async def done(self, item: int) -> None:
        await self._marks.add(item)

    async def _mark(self, items: list[int]) -> None:
        async with transaction(self.engine, subject="the outbox") as conn:
            await store.mark_done(conn, items, now=self.clock())
