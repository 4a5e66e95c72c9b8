"""The collectors a scrape renders: the queue gauges and queuebot's own database's
series, each from the latest reading ``Metrics`` keeps, never reading on the scrape."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from services.estate.model import CanonicalState
from services.metrics.families import bounded
from services.reads.own_gauges import OBLIGATION_STATES, PLAN_JOB_STATES

if TYPE_CHECKING:
    from services.metrics import Metrics


class QueueGauges:
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


class OwnGauges:
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
