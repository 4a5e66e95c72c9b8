"""queuebot's Prometheus metrics (``GET /metrics``): its own counters and the queue gauges.

Each ``Metrics`` owns its registry; nothing is registered globally, so two apps in one
process (the tests) never share a series. The queue gauges (``services/reads/gauges.py``)
are read from the estate at most once every ``refresh_seconds``, not per scrape: one read
at a time (scrapes that arrive during it share it), and after the first one a scrape
waits only a moment for a due read before it answers with the values it has, while the
read goes on in the background. A queue whose read fails keeps its last values, with
``queuebot_queue_gauges_up`` 0 and their age growing. docs/metrics.md lists every series.

No label carries a job id, an error text or a secret. Status values and failure reasons
come from the estate, so at most ``MAX_VALUES`` of each are shown per queue (the largest
counts; the rest are summed under ``OTHER``); counter labels are capped the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import reading
from services.errors import QueuebotError, Unavailable
from services.estate.estate import Estate
from services.estate.model import CanonicalState
from services.known_problems import KnownProblems
from services.models import AlertInbox, ChangeRequest
from services.reads.gauges import QueueSnapshot, snapshot

log = logging.getLogger("queuebot.metrics")

Outcome = Literal["ok", "refused", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "refused", "error")
MAX_VALUES = 50  # distinct values of one label shown per queue (or per counter)
OTHER = "(other)"  # where the values past MAX_VALUES are counted
FIRST_WAIT = 10.0  # seconds a scrape waits for the very first reading of the queues
SCRAPE_WAIT = 0.25  # seconds a later scrape waits for a due reading before it answers
READ_TIMEOUT = 60.0  # seconds one queue's reading may take before it counts as failed

_requests = cast(sa.Table, ChangeRequest.__table__)
_inbox = cast(sa.Table, AlertInbox.__table__)


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


@dataclass
class _Reading:
    """What is known of one queue: its last good snapshot, when it was read (monotonic
    seconds), whether the latest read succeeded and how long it took."""

    snapshot: QueueSnapshot | None = None
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
        first_wait: float = FIRST_WAIT,
        scrape_wait: float = SCRAPE_WAIT,
    ) -> None:
        self.estate = estate
        self.state_engine = state_engine
        self.refresh_seconds = refresh_seconds
        self.request_states = tuple(request_states)
        self.monotonic = monotonic
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
        for name in commands:  # every series from 0, so the first increase shows
            for outcome in OUTCOMES:
                self._commands.inc(name, outcome, by=0)
        self._readings: dict[str, _Reading] = {}
        self._change_requests: dict[str, int] | None = None
        self._set_aside: int | None = None
        self._started: float | None = None  # when the latest refresh started
        self._completed = False  # whether any refresh has finished
        self._task: asyncio.Task[None] | None = None
        self._problems = KnownProblems(log, "metrics")
        for counter in (self._commands, self._alerts, self._posts, self._firings):
            self.registry.register(counter)
        self.registry.register(_QueueGauges(self))

    # -- counters --------------------------------------------------------------------------

    def command(self, name: str, outcome: Outcome) -> None:
        self._commands.inc(name, outcome)

    def alert_received(self, source: str) -> None:
        self._alerts.inc(source)

    def alert_posted(self, kind: str) -> None:
        self._posts.inc(kind)

    def detector_fired(self, detector: str) -> None:
        self._firings.inc(detector)

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
                await self._read_change_requests(self.state_engine)
                await self._read_set_aside(self.state_engine)
        finally:
            self._completed = True

    async def _read_queue(self, estate: Estate, queue: str) -> None:
        """Read one queue; its series appear once a first reading has ended, either way."""
        profile = estate.profiles[queue]
        started = self.monotonic()
        try:
            async with asyncio.timeout(READ_TIMEOUT), estate.connect() as conn:
                taken = await snapshot(conn, profile=profile, now=estate.clock())
        except Exception as exc:  # any failure: keep the last values, say it is down
            last = self._readings.get(queue, _Reading())
            ended = self.monotonic()
            self._readings[queue] = _Reading(last.snapshot, last.read_at, False, ended - started)
            self._problems.report(_problem(exc, f"queue {queue!r}"), doing="reading the queue")
            return
        ended = self.monotonic()
        self._readings[queue] = _Reading(taken, ended, True, ended - started)

    async def _read_change_requests(self, engine: AsyncEngine) -> None:
        state = _requests.c.state
        try:
            async with asyncio.timeout(READ_TIMEOUT), reading(engine) as conn:
                rows = (await conn.execute(sa.select(state, sa.func.count()).group_by(state))).all()
        except Exception as exc:  # keep the last counts
            what = "queuebot's change requests"
            self._problems.report(_problem(exc, what), doing="counting change requests")
            return
        counts = dict.fromkeys(self.request_states, 0)
        counts.update({str(s): int(n) for s, n in rows})
        self._change_requests = counts

    async def _read_set_aside(self, engine: AsyncEngine) -> None:
        query = sa.select(sa.func.count()).where(_inbox.c.set_aside_at.is_not(None))
        try:
            async with asyncio.timeout(READ_TIMEOUT), reading(engine) as conn:
                self._set_aside = int((await conn.execute(query)).scalar_one())
        except Exception as exc:  # keep the last count
            what = "the alert notifications set aside"
            self._problems.report(_problem(exc, what), doing="counting set-aside notifications")

    # -- what the collector reads ------------------------------------------------------------

    def readings(self) -> Iterator[tuple[str, _Reading]]:
        return iter(self._readings.items())

    @property
    def change_requests(self) -> dict[str, int] | None:
        return self._change_requests

    @property
    def set_aside(self) -> int | None:
        return self._set_aside


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
            GaugeMetricFamily(
                "queuebot_change_requests",
                "queuebot's change requests by state (from its own database: the same on "
                "every replica)",
                labels=["state"],
            ),
            GaugeMetricFamily(
                "queuebot_alert_notifications_set_aside",
                "Stored alert notifications whose processing failed on their own: kept in "
                "qb_alert_inbox, no longer tried (from queuebot's own database)",
            ),
        ]

    def collect(self) -> Iterable[Metric]:
        (jobs, by_state, by_reason, actionable, dead, oldest, up, age, took, requests, aside) = (
            self._families()
        )
        now = self.metrics.monotonic()
        for queue, reading_ in self.metrics.readings():
            up.add_metric([queue], 1.0 if reading_.up else 0.0)
            took.add_metric([queue], reading_.seconds)
            taken = reading_.snapshot
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
        counts = self.metrics.change_requests
        if counts is not None:
            for request_state, n in bounded(counts).items():
                requests.add_metric([request_state], n)
        if self.metrics.set_aside is not None:
            aside.add_metric([], self.metrics.set_aside)
        return [jobs, by_state, by_reason, actionable, dead, oldest, up, age, took, requests, aside]
