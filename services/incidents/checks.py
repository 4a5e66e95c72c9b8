"""The validation items queuebot can measure itself, from the counts it writes down every
sample (``qb_queue_samples``) and the queue as it is now:

- ``count-restored``: the queue holds at least as many jobs as the last count written
  down before the fault (before the declaration when the fault time is not known);
- ``backlog-falling``: the pending backlog now is 0 (drained), or below the one written
  down ``BACKLOG_WINDOW`` earlier (falling, not flat or rising), or, where the incident
  put rows back (a redrive or requeue under it), back at or below the backlog written
  down before the first of them went back and not rising: what it put back has left, and
  a backlog that stood there before the incident (rows nobody works) is not its to drain;
- ``synthetic-job``: where ``[incidents] synthetic_job`` says how, one job is submitted
  and the item passes once it is in a terminal state;
- ``redriven-succeeded``, ``dead-letters-low``, ``dead-letters-not-growing``: what the
  incident redrove, judged on the queue now (``redrive_checks``).

Anything else (an item without a check, or a synthetic job with nothing configured) is
confirmed by a person with ``/incident step vN done``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import QueueSample
from services.estate.model import CanonicalState
from services.estate.profile import as_utc

SAMPLES = cast(sa.Table, QueueSample.__table__)
BACKLOG_WINDOW = timedelta(minutes=5)
MEASURED = (
    "count-restored",
    "backlog-falling",
    "redriven-succeeded",
    "dead-letters-low",
    "dead-letters-not-growing",
)


@dataclass(frozen=True)
class Verdict:
    passed: bool | None  # None: not measurable yet
    says: str


@dataclass(frozen=True)
class Count:
    """A queue's counts at ``at``: written down by the sampler, or read now."""

    at: datetime
    total: int
    pending: int
    dead: int


async def count_at(conn: AsyncConnection, queue: str, at: datetime) -> Count | None:
    """The newest count of ``queue`` written down at or before ``at``."""
    found = (
        await conn.execute(
            sa.select(SAMPLES.c.at, SAMPLES.c.total, SAMPLES.c.pending, SAMPLES.c.dead)
            .where(SAMPLES.c.queue == queue, SAMPLES.c.at <= at)
            .order_by(SAMPLES.c.at.desc())
            .limit(1)
        )
    ).first()
    if found is None:
        return None
    when = as_utc(found[0])
    assert when is not None
    return Count(when, int(found[1]), int(found[2]), int(found[3]))


async def count_restored(
    conn: AsyncConnection, *, queue: str, before: datetime, now: datetime
) -> Verdict:
    then = await count_at(conn, queue, before)
    current = await count_at(conn, queue, now)
    if then is None or current is None:
        return Verdict(None, f"no count of {queue} was written down before {before:%H:%M} UTC")
    says = f"{then.total:,} jobs at {then.at:%H:%M} UTC before the fault, {current.total:,} now"
    return Verdict(current.total >= then.total, says)


@dataclass(frozen=True)
class PutBackAt:
    """Where the incident put rows back: its name, and the backlog written down before
    the first of them went back (None: no count that old)."""

    incident: str
    standing: Count | None


def backlog_falling(
    *, queue: str, current: Count, earlier: Count | None, put_back: PutBackAt | None
) -> Verdict:
    """The backlog now (``current``) against ``BACKLOG_WINDOW`` ago (``earlier``) and,
    where the incident put rows back, against before it did."""
    now = current.pending
    if now == 0:
        return Verdict(True, "0 pending now: drained")
    if earlier is not None and now < earlier.pending:
        return Verdict(
            True, f"{earlier.pending:,} pending at {earlier.at:%H:%M} UTC, {now:,} now: falling"
        )
    standing = put_back.standing if put_back is not None else None
    if (
        put_back is not None
        and standing is not None
        and now <= standing.pending
        and (earlier is None or now <= earlier.pending)
    ):
        than = "as" if now == standing.pending else "fewer than"
        return Verdict(
            True,
            f"{now:,} pending now, {than} before {put_back.incident} first put rows back "
            f"({standing.pending:,} at {standing.at:%H:%M} UTC): the rows it put back have "
            "left the backlog",
        )
    if earlier is None:
        minutes = int(BACKLOG_WINDOW.total_seconds() // 60)
        return Verdict(None, f"{queue} has no count {minutes} min old yet; validate again later")
    trend = "flat" if now == earlier.pending else "rising"
    says = f"{earlier.pending:,} pending at {earlier.at:%H:%M} UTC, {now:,} now: {trend}"
    if put_back is not None and standing is not None:
        says += (
            f"; {standing.pending:,} at {standing.at:%H:%M} UTC, before {put_back.incident} "
            "first put rows back"
        )
    return Verdict(False, says)


TERMINAL = (
    CanonicalState.SUCCEEDED,
    CanonicalState.FAILED,
    CanonicalState.DEAD,
    CanonicalState.CANCELLED,
)
_SUBMITTED = re.compile(r"^synthetic job (\S+) submitted")


def synthetic_id(result: str | None) -> str | None:
    """The id of the synthetic job an earlier validation submitted, if it did."""
    matched = _SUBMITTED.match(result or "")
    return matched.group(1) if matched else None


def synthetic_verdict(job: str, status: str, state: CanonicalState, queue: str) -> Verdict:
    says = f"synthetic job {job} submitted to {queue}: {status}"
    return Verdict(True if state in TERMINAL else None, says)
