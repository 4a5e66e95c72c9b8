"""queuebot's Prometheus metrics (``GET /metrics``): its own counters and the queue gauges.

Each ``Metrics`` owns its registry; nothing is registered globally, so two apps in one
process (the tests) never share a series. The queue gauges (``services/reads/gauges.py``)
are read from the estate at most once every ``refresh_seconds``, not per scrape: one read
at a time (scrapes that arrive during it share it), and after the first one a scrape
waits only a moment for a due read before it answers with the values it has, while the
read goes on in the background. A queue whose read fails keeps its last values, with
``queuebot_queue_gauges_up`` 0 and their age growing. On the same refresh, after the
queues, queuebot's own database is read (``services/reads/own_gauges.py``: change
requests, plans, incidents, outbox, schedule) on one connection, with the same handling:
a failed reading keeps the last values, with ``queuebot_own_gauges_up`` 0.
docs/metrics.md lists every series.

No label carries a job id, an error text or a secret. Status values and failure reasons
come from the estate, so at most ``MAX_VALUES`` of each are shown per queue (the largest
counts; the rest are summed under ``OTHER``); counter labels are capped the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from datetime import UTC, datetime
from typing import Literal

from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import reading
from services.errors import QueuebotError, Unavailable
from services.estate.estate import Estate
from services.known_problems import KnownProblems
from services.metrics.collectors import OwnGauges, QueueGauges
from services.metrics.families import Counter, Reading, T
from services.reads.gauges import QueueSnapshot, snapshot
from services.reads.own_gauges import OwnState, OwnStateReader

log = logging.getLogger("queuebot.metrics")

Outcome = Literal["ok", "refused", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "refused", "error")
FIRST_WAIT = 10.0  # seconds a scrape waits for the very first reading of the queues
SCRAPE_WAIT = 0.25  # seconds a later scrape waits for a due reading before it answers
READ_TIMEOUT = 60.0  # seconds one queue's reading may take before it counts as failed
# The platforms whose acknowledged work a restarted process finishes (the console's is
# done in the process that asked, or not at all): each given-up count starts at 0.
ORPHAN_PLATFORMS = ("slack", "discord")


class Metrics:
    """The counters commands, alerts and detectors increment, and the queue gauges.
    ``estate`` and ``state_engine`` may be None where there are no gauges to read."""

    def __init__(
        self,
        *,
        estate: Estate | None,
        state_engine: AsyncEngine | None,
        refresh_seconds: float = 15.0,
        commands: Sequence[str] = (),
        request_states: Sequence[str] = (),
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        first_wait: float = FIRST_WAIT,
        scrape_wait: float = SCRAPE_WAIT,
    ) -> None:
        self.estate = estate
        self.state_engine = state_engine
        self.refresh_seconds = refresh_seconds
        self.request_states = tuple(request_states)
        self.monotonic = monotonic
        self.clock = clock
        self.first_wait = first_wait
        self.scrape_wait = scrape_wait
        self.registry = CollectorRegistry()
        self._commands = Counter(
            "queuebot_commands",
            "Commands handled, by command and outcome: ok; refused (the person may not "
            "run it); error (any other refusal or failure)",
            ("command", "outcome"),
        )
        self._alerts = Counter(
            "queuebot_alerts_received", "Alerts received, by where they came from", ("source",)
        )
        self._posts = Counter(
            "queuebot_alert_posts", "Alert posts made to chat, by kind", ("kind",)
        )
        self._firings = Counter(
            "queuebot_detector_firings",
            "Times a built-in detector fired, by detector",
            ("detector",),
        )
        self._given_up = Counter(
            "queuebot_deliveries_given_up",
            "Acknowledged commands and clicks whose process died each time it carried them "
            "out, answered that they were not retried instead of being run again, by platform",
            ("platform",),
        )
        for name in commands:  # every series from 0, so the first increase shows
            for outcome in OUTCOMES:
                self._commands.inc(name, outcome, by=0)
        for platform in ORPHAN_PLATFORMS:
            self._given_up.inc(platform, by=0)
        self._readings: dict[str, Reading[QueueSnapshot]] = {}
        self._own_reader = OwnStateReader(self.request_states)
        self._own: Reading[OwnState] | None = None  # None until a first reading ended
        self._started: float | None = None  # when the latest refresh started
        self._completed = False  # whether any refresh has finished
        self._task: asyncio.Task[None] | None = None
        self._problems = KnownProblems(log, "metrics")
        for counter in (
            self._commands,
            self._alerts,
            self._posts,
            self._firings,
            self._given_up,
        ):
            self.registry.register(counter)
        self.registry.register(QueueGauges(self))
        self.registry.register(OwnGauges(self))

    # -- counters --------------------------------------------------------------------------

    def count_scheduled(self, kinds: Callable[[], Collection[str]]) -> None:
        """The scheduler kinds this queuebot runs, asked at each reading: the scheduler's
        lag counts only their items (a domain registers its kinds after this is made)."""
        self._own_reader.scheduled_kinds = kinds

    def command(self, name: str, outcome: Outcome) -> None:
        self._commands.inc(name, outcome)

    def alert_received(self, source: str) -> None:
        self._alerts.inc(source)

    def alert_posted(self, kind: str) -> None:
        self._posts.inc(kind)

    def detector_fired(self, detector: str) -> None:
        self._firings.inc(detector)

    def delivery_given_up(self, platform: str) -> None:
        self._given_up.inc(platform)

    # -- the scrape --------------------------------------------------------------------------

    async def exposition(self) -> bytes:
        """The text a scrape answers (Prometheus text format), after the queue gauges
        were refreshed if they were due."""
        await self.refresh_if_due()
        return generate_latest(self.registry)

    async def refresh_if_due(self, *, wait: float | None = None) -> None:
        """Start a refresh of the queue gauges when the last one started at least
        ``refresh_seconds`` ago and none is running; then wait for the running one, up to
        ``wait`` seconds: by default until ``first_wait`` after the first reading started
        while it runs, and ``scrape_wait`` once one has finished."""
        if self.estate is None and self.state_engine is None:
            return
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and (task.done() or task.get_loop() is not loop):
            task = None  # finished, or left by an event loop that is gone
        now = self.monotonic()
        if task is None and (self._started is None or now - self._started >= self.refresh_seconds):
            self._started = now
            task = self._task = loop.create_task(self._refresh())
        if task is not None:
            if wait is None and self._completed:
                wait = self.scrape_wait
            elif wait is None:  # the first reading: every scrape waits until the same time
                started = self._started if self._started is not None else now
                wait = max(0.0, self.first_wait - (now - started))
            await asyncio.wait({task}, timeout=wait)

    async def close(self) -> None:
        """Stop a refresh still running (the process is stopping)."""
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _refresh(self) -> None:
        try:
            if self.estate is not None:
                for queue in self.estate.profiles:
                    await self._read_queue(self.estate, queue)
            if self.state_engine is not None:
                await self._read_own(self.state_engine)
        finally:
            self._completed = True

    async def _read_queue(self, estate: Estate, queue: str) -> None:
        """Read one queue; its series appear once a first reading has ended, either way."""
        profile = estate.profiles[queue]

        async def read() -> QueueSnapshot:
            async with estate.connect() as conn:
                return await snapshot(conn, profile=profile, now=estate.clock())

        self._readings[queue] = await self._timed(
            self._readings.get(queue), read, f"queue {queue!r}", "reading the queue"
        )

    async def _read_own(self, engine: AsyncEngine) -> None:
        """Read queuebot's own database (change requests, plans, incidents, outbox,
        schedule) on one connection; a failure keeps the last values, shown as down."""

        async def read() -> OwnState:
            async with reading(engine) as conn:
                return await self._own_reader.read(conn, now=self.clock())

        self._own = await self._timed(
            self._own, read, "queuebot's own database", "reading queuebot's own gauges"
        )

    async def _timed(
        self,
        last: Reading[T] | None,
        read: Callable[[], Awaitable[T]],
        what: str,
        doing: str,
    ) -> Reading[T]:
        """One reading within ``READ_TIMEOUT``: its value, or on any failure the last
        values kept and marked down (the problem logged once while it lasts)."""
        started = self.monotonic()
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                value = await read()
        except Exception as exc:  # any failure: keep the last values, say it is down
            kept = last or Reading[T]()
            self._problems.report(_problem(exc, what), doing=doing)
            return Reading(kept.value, kept.read_at, False, self.monotonic() - started)
        ended = self.monotonic()
        return Reading(value, ended, True, ended - started)

    # -- what the collector reads ------------------------------------------------------------

    def readings(self) -> Iterator[tuple[str, Reading[QueueSnapshot]]]:
        return iter(self._readings.items())

    @property
    def own(self) -> Reading[OwnState] | None:
        """What is known of queuebot's own database (None before a first reading ended)."""
        return self._own


def _problem(exc: Exception, what: str) -> QueuebotError:
    """A failure as one line to log: queuebot's own words, or the kind of failure (a
    foreign error's text may hold a statement; it is never logged or shown here)."""
    if isinstance(exc, QueuebotError):
        return exc
    if isinstance(exc, TimeoutError):
        return Unavailable(f"reading {what} took over {READ_TIMEOUT:g} s")
    return Unavailable(f"reading {what} failed ({type(exc).__name__})")
