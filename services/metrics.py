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
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, Literal, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import reading
from services.errors import QueuebotError, Unavailable
from services.estate.estate import Estate
from services.estate.model import CanonicalState
from services.known_problems import KnownProblems
from services.reads.gauges import QueueSnapshot, snapshot
from services.reads.own_gauges import (
    OBLIGATION_STATES,
    PLAN_JOB_STATES,
    OwnState,
    OwnStateReader,
)

log = logging.getLogger("queuebot.metrics")

Outcome = Literal["ok", "refused", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "refused", "error")
MAX_VALUES = 50  # distinct values of one label shown per queue (or per counter)
OTHER = "(other)"  # where the values past MAX_VALUES are counted
FIRST_WAIT = 10.0  # seconds a scrape waits for the very first reading of the queues
SCRAPE_WAIT = 0.25  # seconds a later scrape waits for a due reading before it answers
READ_TIMEOUT = 60.0  # seconds one queue's reading may take before it counts as failed
# The platforms whose acknowledged work a restarted process finishes (the console's is
# done in the process that asked, or not at all): each given-up count starts at 0.
ORPHAN_PLATFORMS = ("slack", "discord")


def bounded(counts: Mapping[str, int], limit: int = MAX_VALUES) -> dict[str, int]:
    """``counts`` with at most ``limit`` keys: the largest counts, the rest summed under
    ``OTHER``."""
    if len(counts) <= limit:
        return dict(counts)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[: limit - 1])
    kept[OTHER] = kept.get(OTHER, 0) + sum(n for _, n in ranked[limit - 1 :])
    return kept


class _Counter:
    """A counter family with its own labels, rendered without the ``_created`` series the
    client library adds (a second series per counter that no rule here needs). The first
    value of the first label is capped: after ``MAX_VALUES`` - 1 distinct ones, any new
    one is counted as ``OTHER``; the other labels take fixed words."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {}
        self._firsts: set[str] = set()

    def inc(self, *values: str, by: float = 1.0) -> None:
        first, *rest = values
        if first not in self._firsts:
            if len(self._firsts) >= MAX_VALUES - 1:
                first = OTHER
            else:
                self._firsts.add(first)
        key = (first, *rest)
        self.values[key] = self.values.get(key, 0.0) + by

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labels)]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, value in self.values.items():
            family.add_metric(list(key), value)
        return [family]


T = TypeVar("T")


@dataclass
class _Reading(Generic[T]):
    """What is known of one source (a queue's snapshot, queuebot's own database's state):
    its last good value, when it was read (monotonic seconds), whether the latest read
    succeeded and how long it took."""

    value: T | None = None
    read_at: float | None = None
    up: bool = False
    seconds: float = 0.0


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
        self._commands = _Counter(
            "queuebot_commands",
            "Commands handled, by command and outcome: ok; refused (the person may not "
            "run it); error (any other refusal or failure)",
            ("command", "outcome"),
        )
        self._alerts = _Counter(
            "queuebot_alerts_received", "Alerts received, by where they came from", ("source",)
        )
        self._posts = _Counter(
            "queuebot_alert_posts", "Alert posts made to chat, by kind", ("kind",)
        )
        self._firings = _Counter(
            "queuebot_detector_firings",
            "Times a built-in detector fired, by detector",
            ("detector",),
        )
        self._given_up = _Counter(
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
        self._readings: dict[str, _Reading[QueueSnapshot]] = {}
        self._own_reader = OwnStateReader(self.request_states)
        self._own: _Reading[OwnState] | None = None  # None until a first reading ended
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
        self.registry.register(_QueueGauges(self))
        self.registry.register(_OwnGauges(self))

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
        last: _Reading[T] | None,
        read: Callable[[], Awaitable[T]],
        what: str,
        doing: str,
    ) -> _Reading[T]:
        """One reading within ``READ_TIMEOUT``: its value, or on any failure the last
        values kept and marked down (the problem logged once while it lasts)."""
        started = self.monotonic()
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                value = await read()
        except Exception as exc:  # any failure: keep the last values, say it is down
            kept = last or _Reading[T]()
            self._problems.report(_problem(exc, what), doing=doing)
            return _Reading(kept.value, kept.read_at, False, self.monotonic() - started)
        ended = self.monotonic()
        return _Reading(value, ended, True, ended - started)

    # -- what the collector reads ------------------------------------------------------------

    def readings(self) -> Iterator[tuple[str, _Reading[QueueSnapshot]]]:
        return iter(self._readings.items())

    @property
    def own(self) -> _Reading[OwnState] | None:
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


class _QueueGauges:
    """The custom collector: each scrape renders the readings as they are, never reads."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        queue = ["queue"]
        return [
            GaugeMetricFamily(
                "queuebot_queue_jobs",
                "Rows of the queue's main table by status",
                labels=[*queue, "status"],
            ),
            GaugeMetricFamily(
                "queuebot_queue_jobs_by_state",
                "Rows of the queue's main table by canonical state (pending, in_flight, "
                "succeeded, failed, dead, cancelled, unknown)",
                labels=[*queue, "state"],
            ),
            GaugeMetricFamily(
                "queuebot_queue_failed_by_reason",
                "Rows in the failed state by failure reason (queues that keep one)",
                labels=[*queue, "reason"],
            ),
            GaugeMetricFamily(
                "queuebot_queue_failed_actionable",
                "Failed rows whose failure reason asks for a person: timeout, "
                "implementation_error, spawn_oom (queues that keep a failure reason)",
                labels=queue,
            ),
            GaugeMetricFamily(
                "queuebot_queue_dead_letters",
                "Dead letters: the rows a redrive takes out (failed and dead states)",
                labels=queue,
            ),
            GaugeMetricFamily(
                "queuebot_queue_oldest_pending_age_seconds",
                "How long the oldest pending row had waited when the gauges were read (0: "
                "nothing pending)",
                labels=queue,
            ),
            GaugeMetricFamily(
                "queuebot_queue_gauges_up",
                "Whether the latest reading of the queue succeeded (0: the values shown are "
                "the last good ones, if any)",
                labels=queue,
            ),
            GaugeMetricFamily(
                "queuebot_queue_gauges_age_seconds",
                "Seconds since the queue's gauges shown were read",
                labels=queue,
            ),
            GaugeMetricFamily(
                "queuebot_queue_gauges_read_seconds",
                "How long the latest reading of the queue took",
                labels=queue,
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        (jobs, by_state, by_reason, actionable, dead, oldest, up, age, took) = self._families()
        now = self.metrics.monotonic()
        for queue, reading_ in self.metrics.readings():
            up.add_metric([queue], 1.0 if reading_.up else 0.0)
            took.add_metric([queue], reading_.seconds)
            taken = reading_.value
            if taken is None or reading_.read_at is None:
                continue
            age.add_metric([queue], max(0.0, now - reading_.read_at))
            for status, n in bounded(taken.by_status).items():
                jobs.add_metric([queue, status], n)
            for state in CanonicalState:
                by_state.add_metric([queue, state.value], taken.by_state.get(state, 0))
            if taken.by_reason is not None:
                for reason, n in bounded(taken.by_reason).items():
                    by_reason.add_metric([queue, reason], n)
            if taken.failed_actionable is not None:
                actionable.add_metric([queue], taken.failed_actionable)
            dead.add_metric([queue], taken.dead_letters)
            oldest.add_metric([queue], taken.oldest_pending_age or 0.0)
        return [jobs, by_state, by_reason, actionable, dead, oldest, up, age, took]


class _OwnGauges:
    """The series read from queuebot's own database (the same on every replica): rendered
    from the latest reading, never read here. Before a first reading ended there are none;
    after a failed one the last good values stay, with ``queuebot_own_gauges_up`` 0."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return list(self._families().values())

    def _families(self) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        def gauge(name: str, text: str, *labels: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=list(labels))

        def counter(name: str, text: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, text, labels=[])

        families: list[GaugeMetricFamily | CounterMetricFamily] = [
            gauge(
                "queuebot_change_requests",
                "queuebot's change requests by state (from its own database: the same on "
                "every replica)",
                "state",
            ),
            gauge(
                "queuebot_alert_notifications_set_aside",
                "Stored alert notifications whose processing failed on their own: kept in "
                "qb_alert_inbox, no longer tried (from queuebot's own database)",
            ),
            gauge(
                "queuebot_plans",
                "Redrive plans by state (running, halted, completed, rolled_back, closed)",
                "state",
            ),
            gauge(
                "queuebot_plan_wave",
                "The active plan's current wave on the queue (0: the sample; -1: not started)",
                "queue",
            ),
            gauge("queuebot_plan_waves", "Waves in the active plan's schedule", "queue"),
            gauge(
                "queuebot_plan_halted",
                "1 when the queue's active plan is halted, 0 while it runs",
                "queue",
            ),
            gauge(
                "queuebot_plan_jobs",
                "The active plan's jobs by state (waiting, redriven, skipped, succeeded, "
                "redead, rolled_back)",
                "queue",
                "state",
            ),
            counter(
                "queuebot_plan_jobs_redriven",
                "Jobs redriven by plans, all plans ever (from queuebot's own database)",
            ),
            counter(
                "queuebot_plan_halts",
                "Times a plan was halted, by a re-dead-letter or by a person, all plans ever "
                "(from queuebot's own database)",
            ),
            gauge(
                "queuebot_incidents_open",
                "Open incidents, by whether they block redrives",
                "blocks_redrive",
            ),
            gauge(
                "queuebot_incident_obligations",
                "The open incidents' communications by state: pending (deadline ahead), "
                "overdue (deadline passed, not yet marked missed), met, missed",
                "state",
            ),
            gauge("queuebot_outbox_pending", "Outbox items (chat posts) not done yet"),
            gauge(
                "queuebot_outbox_oldest_age_seconds",
                "How long the oldest outbox item not done yet has waited (0: none)",
            ),
            gauge("queuebot_scheduler_due", "Scheduled items due and not yet run"),
            gauge(
                "queuebot_scheduler_lag_seconds",
                "How late the most overdue scheduled item is (0: none is due)",
            ),
            gauge(
                "queuebot_own_gauges_up",
                "Whether the latest reading of queuebot's own database succeeded (0: the "
                "values shown are the last good ones, if any)",
            ),
            gauge(
                "queuebot_own_gauges_age_seconds",
                "Seconds since the values read from queuebot's own database were read",
            ),
            gauge(
                "queuebot_own_gauges_read_seconds",
                "How long the latest reading of queuebot's own database took",
            ),
        ]
        return {family.name: family for family in families}

    def collect(self) -> Iterable[Metric]:
        f = self._families()
        own = self.metrics.own
        if own is None:
            return list(f.values())
        f["queuebot_own_gauges_up"].add_metric([], 1.0 if own.up else 0.0)
        f["queuebot_own_gauges_read_seconds"].add_metric([], own.seconds)
        state = own.value
        if state is None or own.read_at is None:
            return list(f.values())
        now = self.metrics.monotonic()
        f["queuebot_own_gauges_age_seconds"].add_metric([], max(0.0, now - own.read_at))
        for request_state, n in bounded(state.change_requests).items():
            f["queuebot_change_requests"].add_metric([request_state], n)
        f["queuebot_alert_notifications_set_aside"].add_metric([], state.set_aside)
        for plan_state, n in bounded(state.plans).items():
            f["queuebot_plans"].add_metric([plan_state], n)
        for plan in state.active_plans:
            f["queuebot_plan_wave"].add_metric([plan.queue], plan.wave)
            f["queuebot_plan_waves"].add_metric([plan.queue], plan.waves)
            f["queuebot_plan_halted"].add_metric([plan.queue], 1.0 if plan.halted else 0.0)
            for job_state in PLAN_JOB_STATES:
                n = plan.jobs.get(job_state, 0)
                f["queuebot_plan_jobs"].add_metric([plan.queue, job_state], n)
        f["queuebot_plan_jobs_redriven"].add_metric([], state.plan_jobs_redriven)
        f["queuebot_plan_halts"].add_metric([], state.plan_halts)
        for blocking, n in state.incidents_open.items():
            f["queuebot_incidents_open"].add_metric([blocking], n)
        for obligation_state in OBLIGATION_STATES:
            n = state.obligations.get(obligation_state, 0)
            f["queuebot_incident_obligations"].add_metric([obligation_state], n)
        f["queuebot_outbox_pending"].add_metric([], state.outbox_pending)
        f["queuebot_outbox_oldest_age_seconds"].add_metric([], state.outbox_oldest_age)
        f["queuebot_scheduler_due"].add_metric([], state.scheduler_due)
        f["queuebot_scheduler_lag_seconds"].add_metric([], state.scheduler_lag)
        return list(f.values())
