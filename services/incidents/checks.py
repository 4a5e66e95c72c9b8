"""The validation items queuebot can measure itself, from the counts it writes down every
sample (``qb_queue_samples``):

- ``count-restored``: the queue holds at least as many jobs as the last count written
  down before the fault (before the declaration when the fault time is not known);
- ``backlog-falling``: the pending backlog of the newest count is below the one written
  down ``BACKLOG_WINDOW`` earlier (falling, not flat or rising).

- ``synthetic-job``: where ``[incidents] synthetic_job`` says how, one job is submitted
  and the item passes once it is in a terminal state.

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

from services.estate.model import CanonicalState
from services.models import QueueSample

SAMPLES = cast(sa.Table, QueueSample.__table__)
BACKLOG_WINDOW = timedelta(minutes=5)
MEASURED = ("count-restored", "backlog-falling")


@dataclass(frozen=True)
class Verdict:
    passed: bool | None  # None: not measurable yet
    says: str


async def _count_at(
    conn: AsyncConnection, queue: str, at: datetime, *, latest: bool = True
) -> tuple[datetime, int, int] | None:
    """(when, total, pending) of the newest sample at or before ``at``."""
    found = (
        await conn.execute(
            sa.select(SAMPLES.c.at, SAMPLES.c.total, SAMPLES.c.pending)
            .where(SAMPLES.c.queue == queue, SAMPLES.c.at <= at)
            .order_by(SAMPLES.c.at.desc())
            .limit(1)
        )
    ).first()
    return None if found is None else (found[0], int(found[1]), int(found[2]))


async def count_restored(
    conn: AsyncConnection, *, queue: str, before: datetime, now: datetime
) -> Verdict:
    then = await _count_at(conn, queue, before)
    current = await _count_at(conn, queue, now)
    if then is None or current is None:
        return Verdict(None, f"no count of {queue} was written down before {before:%H:%M} UTC")
    says = f"{then[1]:,} jobs at {then[0]:%H:%M} UTC before the fault, {current[1]:,} now"
    return Verdict(current[1] >= then[1], says)


async def backlog_falling(conn: AsyncConnection, *, queue: str, now: datetime) -> Verdict:
    current = await _count_at(conn, queue, now)
    earlier = await _count_at(conn, queue, now - BACKLOG_WINDOW)
    if current is None or earlier is None:
        minutes = int(BACKLOG_WINDOW.total_seconds() // 60)
        return Verdict(None, f"{queue} has no count {minutes} min old yet; validate again later")
    says = (
        f"{earlier[2]:,} pending at {earlier[0]:%H:%M} UTC, {current[2]:,} at "
        f"{current[0]:%H:%M} UTC"
    )
    if current[2] < earlier[2]:
        return Verdict(True, says + ": falling")
    return Verdict(False, says + (": flat" if current[2] == earlier[2] else ": rising"))


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
