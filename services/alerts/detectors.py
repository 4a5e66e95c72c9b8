"""queuebot's own detectors, for teams without Prometheus: they judge the queue counts
written down every sample (``qb_queue_samples``) and raise alerts through the same
pipeline as Alertmanager's (same threads, same dedup), resolved when the condition
clears. They run in the sample's scheduled job, so replicas never double-fire.

- queue loss: jobs keep arriving (the row count grew) while none reached a terminal
  state (succeeded, failed, dead, cancelled) over the window, with work waiting;
- dead-letter growth: dead letters grew by at least a threshold over the window;
- failed-actionable: failed rows whose reason is actionable (timeout,
  implementation_error, spawn_oom) stayed above a threshold for the whole window (the
  FailedJobsAccumulating alert, built in).

A detector says nothing until the counts cover its window (after a start, that takes
the window's length). It posts only when its verdict changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.alerts.model import DETECTOR
from services.alerts.payload import Alert, Notification, parse_time
from services.alerts.service import FiringCounter
from services.alerts.store import GROUPS, key_hash, store_notification
from services.config.alerts import DetectorsConfig
from services.db.tables import QueueSample
from services.estate.model import CanonicalState
from services.estate.profile import QueueProfile, as_utc

SAMPLES = cast(sa.Table, QueueSample.__table__)
SOURCE = DETECTOR
RECEIVER = "queuebot"
TERMINAL = (
    CanonicalState.SUCCEEDED,
    CanonicalState.FAILED,
    CanonicalState.DEAD,
    CanonicalState.CANCELLED,
)
QUEUE_LOSS = "QueueLoss"
DEAD_LETTERS = "DeadLettersGrowing"
FAILED_JOBS = "FailedJobsAccumulating"


@dataclass(frozen=True)
class Sample:
    at: datetime
    total: int
    dead: int
    pending: int
    terminal: int
    failed_actionable: int | None


@dataclass(frozen=True)
class Verdict:
    detector: str
    firing: bool
    summary: str
    description: str


def _sample(row: Mapping[str, Any], profile: QueueProfile) -> Sample:
    counts: Mapping[str, int] = row["counts"] or {}
    terminal = sum(n for status, n in counts.items() if profile.canonical(status) in TERMINAL)
    detail: Mapping[str, Any] = row.get("detail") or {}
    actionable = detail.get("failed_actionable")
    at = as_utc(row["at"])
    assert at is not None
    return Sample(
        at=at,
        total=int(row["total"]),
        dead=int(row["dead"]),
        pending=int(row["pending"]),
        terminal=terminal,
        failed_actionable=None if actionable is None else int(actionable),
    )


async def _history(conn: AsyncConnection, profile: QueueProfile, since: datetime) -> list[Sample]:
    """The samples from the newest one at or before ``since`` to now, oldest first."""
    base_at = (
        await conn.execute(
            sa.select(sa.func.max(SAMPLES.c.at)).where(
                SAMPLES.c.queue == profile.queue, SAMPLES.c.at <= since
            )
        )
    ).scalar_one_or_none()
    if base_at is None:
        return []
    rows = (
        await conn.execute(
            sa.select(SAMPLES)
            .where(SAMPLES.c.queue == profile.queue, SAMPLES.c.at >= base_at)
            .order_by(SAMPLES.c.at)
        )
    ).mappings()
    return [_sample(dict(row), profile) for row in rows]


def queue_loss(history: Sequence[Sample], *, minutes: int, min_backlog: int) -> bool | None:
    if len(history) < 2:
        return None
    first, last = history[0], history[-1]
    return (
        last.total > first.total
        and last.terminal <= first.terminal
        and (last.pending >= min_backlog)
    )


def dead_growth(history: Sequence[Sample], *, min_increase: int) -> bool | None:
    if len(history) < 2:
        return None
    return history[-1].dead - history[0].dead >= min_increase


def failed_actionable(history: Sequence[Sample], *, threshold: int) -> bool | None:
    values = [s.failed_actionable for s in history]
    if len(history) < 2 or values[-1] is None:
        return None
    if values[-1] <= threshold:
        return False  # cleared: resolved at once
    return all(v is not None and v > threshold for v in values)


async def judge(
    conn: AsyncConnection, *, profile: QueueProfile, config: DetectorsConfig, now: datetime
) -> list[Verdict]:
    """Each enabled detector's verdict on the queue now (none where the counts do not
    cover its window yet)."""
    verdicts: list[Verdict] = []
    queue = profile.queue
    loss = config.queue_loss
    if loss.enabled:
        history = await _history(conn, profile, now - timedelta(minutes=loss.minutes))
        firing = queue_loss(history, minutes=loss.minutes, min_backlog=loss.min_backlog)
        if firing is not None:
            first, last = history[0], history[-1]
            verdicts.append(
                Verdict(
                    QUEUE_LOSS,
                    firing,
                    f"Jobs of {queue} are accepted but none finishes",
                    f"{last.total - first.total:+,} jobs since {first.at:%H:%M} UTC, "
                    f"{last.terminal - first.terminal:+,} in a terminal state, "
                    f"{last.pending:,} waiting",
                )
            )
    growth = config.dead_letter_growth
    if growth.enabled:
        history = await _history(conn, profile, now - timedelta(minutes=growth.window_minutes))
        firing = dead_growth(history, min_increase=growth.min_increase)
        if firing is not None:
            first, last = history[0], history[-1]
            verdicts.append(
                Verdict(
                    DEAD_LETTERS,
                    firing,
                    f"Dead letters of {queue} are growing",
                    f"{last.dead:,} dead now, {first.dead:,} at {first.at:%H:%M} UTC "
                    f"({last.dead - first.dead:+,})",
                )
            )
    failed = config.failed_actionable
    if failed.enabled:
        history = await _history(conn, profile, now - timedelta(minutes=failed.minutes))
        firing = failed_actionable(history, threshold=failed.threshold)
        if firing is not None:
            verdicts.append(
                Verdict(
                    FAILED_JOBS,
                    firing,
                    f"Failed jobs are accumulating in {queue}",
                    f"{history[-1].failed_actionable:,} failed jobs with an actionable reason "
                    f"(timeout, implementation_error, spawn_oom); more than "
                    f"{failed.threshold} for {failed.minutes} min",
                )
            )
    return verdicts


def group_key(detector: str, queue: str) -> str:
    return f'{{}}:{{alertname="{detector}", queue="{queue}"}}'


async def raise_changes(
    conn: AsyncConnection,
    *,
    queue: str,
    verdicts: Sequence[Verdict],
    now: datetime,
    counter: FiringCounter | None = None,
) -> int:
    """Store a notification for each verdict that differs from its group's state; how
    many were stored."""
    stored = 0
    for verdict in verdicts:
        key = group_key(verdict.detector, queue)
        fingerprint = hashlib.sha256(key.encode()).hexdigest()[:16]
        known = (
            await conn.execute(
                sa.select(GROUPS.c.status, GROUPS.c.alerts).where(
                    GROUPS.c.key_hash == key_hash(SOURCE, RECEIVER, key)
                )
            )
        ).first()
        firing_now = known is not None and known[0] == "firing"
        if known is None and not verdict.firing:
            continue  # never fired: nothing to resolve
        if firing_now == verdict.firing:
            continue
        starts_at = now
        if not verdict.firing and known is not None:
            record = (known[1] or {}).get(fingerprint) or {}
            starts_at = parse_time(record.get("starts_at")) or now
        status: Literal["firing", "resolved"] = "firing" if verdict.firing else "resolved"
        labels = {
            "alertname": verdict.detector,
            "queue": queue,
            "severity": "warning",
            "source": "queuebot",
        }
        annotations = {"summary": verdict.summary, "description": verdict.description}
        notification = Notification(
            version="4",
            receiver=RECEIVER,
            status=status,
            groupKey=key,
            groupLabels={"alertname": verdict.detector, "queue": queue},
            commonLabels=labels,
            commonAnnotations=annotations,
            alerts=[
                Alert(
                    status=status,
                    labels=labels,
                    annotations=annotations,
                    startsAt=starts_at,
                    endsAt=None if verdict.firing else now,
                    fingerprint=fingerprint,
                )
            ],
        )
        await store_notification(conn, notification, source=SOURCE, now=now)
        stored += 1
        if verdict.firing and counter is not None:
            counter.detector_fired(verdict.detector)
    return stored
