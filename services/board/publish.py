"""The board kept current where it is shown: each Slack user's App Home (their own board)
and a Discord channel's status message (the board for anyone), refreshed through the
outbox within seconds of a change.

A change worth showing (every change queuebot makes writes an audit event in its own
transaction; ``CHANGES`` names the events that move the board) writes a refresh item in
that same transaction (``refresh_soon``), so the refresh is as durable as the change: a
process that dies between the commit and the publish leaves the item for the next relay.
Items are due at the end of the ``GATHER`` window they were written in and collapse per
window, so a burst of changes is one refresh, and a change is shown at most ``GATHER``
(and the publish) after it. The refresh (``post``) first covers every other refresh item
already due (it reads everything afresh, after them), then reads the board once for
everyone, words each place's board, and publishes only where the words changed (a digest
per place): Slack's views.publish and Discord's edits are rate-limited. Dead-letter
counts move without queuebot, so a refresh is also asked for every ``RECOUNT``.

A place that cannot be shown to now (Slack or Discord refusing, a person gone) keeps its
old digest and is tried again with the next refresh: it never holds the others back.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox
from services.audit import NewEvent
from services.board import shown
from services.board.messages import board_message, digest
from services.board.service import BoardReader, Snapshot
from services.board.shown import Place
from services.db import transaction
from services.errors import QueuebotError, Unavailable
from services.known_problems import KnownProblems
from services.message import Message

log = logging.getLogger("queuebot.board")
REFRESH = "board.refresh"  # the outbox's kind
SUBJECT = "boards"  # one subject: refreshes go out one at a time, in order
RECOUNT = "board.recount"  # the scheduler's kind: a refresh every RECOUNT_EVERY
RECOUNT_EVERY = timedelta(seconds=60)
GATHER = timedelta(seconds=2)  # a burst of changes within this is one refresh
SEEN_WITHIN = timedelta(days=7)  # App Homes opened within this are kept current
AT_ONCE = 8  # publishes in flight at once
# The audit events of what a board shows: requests asked, decided, expired; a plan's
# waves, halts and end; an incident declared, resolved, led, told or missed.
CHANGES = frozenset(
    {
        "change.requested",
        "change.approved",
        "change.rejected",
        "change.executed",
        "change.expired",
        "plan.started",
        "plan.wave_started",
        "plan.wave_finished",
        "plan.halted",
        "plan.resumed",
        "plan.completed",
        "plan.closed",
        "plan.rolled_back",
        "incident.declared",
        "incident.resolved",
        "incident.lead_changed",
        "incident.notified",
        "incident.deadline_missed",
    }
)


class Surface(Protocol):
    """Where a platform shows the board (bot/slack/home.py, bot/discord/board.py)."""

    @property
    def platform(self) -> str: ...

    @property
    def channel(self) -> str | None:
        """None: each person who opens it sees their own (an App Home); else the channel
        of the one board for anyone."""
        ...

    async def show(self, place: Place, message: Message) -> str | None:
        """Show ``message`` at ``place``; the id of the message it is shown as, where the
        platform has one (a status message posted again gets a new one)."""
        ...


# A person's board in words, for the place they opened it: their standing resolved and
# their authorization checked by the commands layer (commands/home.py), over a snapshot
# read once for every place.
Words = Callable[[Snapshot, str, str], Awaitable[Message]]


async def refresh_soon(conn: AsyncConnection, now: datetime) -> None:
    """Ask, inside the caller's transaction, for the boards to be refreshed at the end of
    the current ``GATHER`` window (one refresh per window, however many ask)."""
    step = GATHER.total_seconds()
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)  # queuebot's times are UTC
    window = math.floor(now.timestamp() / step) + 1
    await outbox.add(
        conn,
        kind=REFRESH,
        subject=SUBJECT,
        payload={},
        now=now,
        priority=outbox.BULK,
        collapse=f"window:{window}",
        due_at=datetime.fromtimestamp(window * step, tz=UTC),
    )


async def refresh_now(conn: AsyncConnection, now: datetime) -> None:
    """Ask for a refresh at once (someone opened their App Home; the recount)."""
    await outbox.add(conn, kind=REFRESH, subject=SUBJECT, payload={}, now=now, priority=outbox.BULK)


_ASKED = "qb_board_refresh_asked"  # conn.info: the transaction that asked already


async def on_events(conn: AsyncConnection, events: Sequence[NewEvent]) -> None:
    """The audit trail's ``on_append``: a refresh when an event moves the board, once per
    transaction however many appends it makes (an approval that runs a staged redrive
    appends four events in as many calls)."""
    moved = [e for e in events if e.action in CHANGES]
    if not moved:
        return
    transaction = conn.sync_connection.get_transaction() if conn.sync_connection else None
    if transaction is not None and conn.info.get(_ASKED) is transaction:
        return
    await refresh_soon(conn, moved[-1].at)
    conn.info[_ASKED] = transaction


class BoardPublisher:
    """Keeps the board current on every ``surfaces`` (none: this process only asks for
    refreshes, which a process that has them delivers). ``words`` is set by the wiring
    (it is the commands layer's); without it no App Home is published."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        reader: BoardReader,
        clock: Callable[[], datetime],
        surfaces: Sequence[Surface] = (),
    ) -> None:
        self.engine = engine
        self.reader = reader
        self.clock = clock
        self.surfaces = list(surfaces)
        self.words: Words | None = None
        self.problems = KnownProblems(log, "the board's refresh")
        self.wake: Callable[[], None] = lambda: None  # the outbox's, once it is wired

    async def opened(self, *, platform: str, account: str) -> None:
        """A person opened their App Home: kept current from now on, and shown at once."""
        now = self.clock()
        async with transaction(self.engine, subject="the board") as conn:
            await shown.seen(conn, platform=platform, account=account, at=now)
            await refresh_now(conn, now)
        self.wake()

    async def post(self, item: outbox.Item) -> None:
        """The outbox's poster of a refresh: every place shown what changed there."""
        now = self.clock()
        async with transaction(self.engine, subject="the board") as conn:
            await outbox.cover(conn, item, now=now)
            places = [await self._places(conn, surface, now) for surface in self.surfaces]
        if not any(places):
            return  # nobody has opened an App Home lately, and no Discord board: no read
        snapshot = await self.reader.read()
        gate = asyncio.Semaphore(AT_ONCE)
        for surface, where in zip(self.surfaces, places, strict=True):
            await asyncio.gather(*(self._show(surface, p, snapshot, gate) for p in where))

    async def _places(self, conn: AsyncConnection, surface: Surface, now: datetime) -> list[Place]:
        if surface.channel is None:
            return await shown.places(conn, platform=surface.platform, since=now - SEEN_WITHIN)
        await shown.forget(conn, platform=surface.platform, keep=surface.channel)
        found = await shown.places(conn, platform=surface.platform, account=surface.channel)
        return found or [Place(surface.platform, surface.channel, now)]

    async def _show(
        self, surface: Surface, place: Place, snapshot: Snapshot, gate: asyncio.Semaphore
    ) -> None:
        async with gate:
            if surface.channel is not None:
                message = board_message(snapshot.board(None))
            elif self.words is not None:
                message = await self.words(snapshot, place.platform, place.account)
            else:
                return
            said = digest(message)
            if said == place.digest and (surface.channel is None or place.message_id):
                return  # shown already
            try:
                message_id = await surface.show(place, message)
            except Exception as exc:  # tried again with the next refresh
                why = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, QueuebotError):
                    why = exc.message
                where = f"on {place.platform} to {place.account}"
                # one line while it lasts (a person gone from the workspace fails every time)
                self.problems.report(Unavailable(f"{where}: {why}"), doing="showing the board")
                return
            async with transaction(self.engine, subject="the board") as conn:
                await shown.showed(conn, place, digest=said, message_id=message_id, at=self.clock())
