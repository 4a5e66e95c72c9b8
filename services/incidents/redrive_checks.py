"""The validation items queuebot measures for a redrive, from what the incident put back
(``put_back``) and the queue as it is now:

- ``redriven-succeeded``: every job redriven (or requeued) under the incident is in a
  succeeded state now (a job its system deletes on success counts as succeeded once
  gone), none dead again; still queued or running is "not yet";
- ``dead-letters-low``: where the queue keeps failure reasons, its failed rows with an
  actionable reason are at or below the FailedJobsAccumulating alert's threshold
  (``[alerts.detectors.failed_actionable] threshold``); elsewhere its dead letters now are
  below the count written down when the incident was declared by at least the jobs
  redriven under it;
- ``dead-letters-not-growing``: since the incident first put rows back, no row died but
  jobs queuebot had redrove before they died again (the redrive's own growth check,
  ``samples.dead_growth``, over that span).

Each reads the queue on the caller's connection (``dead-letters-not-growing`` also reads
queuebot's tables on it, which live beside the queue wherever anything was redriven).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.ops import CHUNK, chunks_of_whole
from services.estate.profile import QueueProfile
from services.incidents.checks import Count, Verdict
from services.incidents.put_back import PutBack
from services.reads import samples
from services.reads.gauges import QueueSnapshot


def _nothing(put: PutBack) -> str | None:
    """Why there is nothing to judge, where there is nothing."""
    if put.first is None:
        return f"nothing was redriven under {put.incident} yet"
    if not put.items:
        return f"every job redriven under {put.incident} was rolled back: none is out"
    return None


async def redriven_succeeded(
    conn: AsyncConnection, *, profile: QueueProfile, put: PutBack
) -> Verdict:
    nothing = _nothing(put)
    if nothing is not None:
        return Verdict(None, nothing)
    dead: set[str] = set()
    out: set[str] = set()
    succeeded: set[str] = set()
    for part in chunks_of_whole(list(put.items), CHUNK, key=lambda i: i.job_id):
        status = await profile.plan_ops.wave_status(conn, items=part)
        dead.update(job for job, _ in status.redead)
        out.update(status.open_jobs)
        succeeded.update(status.succeeded)
    jobs = {i.job_id for i in put.items}
    out -= dead
    succeeded -= dead | out
    other = len(jobs) - len(dead) - len(out) - len(succeeded)
    said = [f"{len(succeeded):,} succeeded"]
    said.append(f"{len(dead):,} dead again now" if dead else "none dead again now")
    if out:
        said.append(f"{len(out):,} still queued or running")
    if other:
        said.append(f"{other:,} ended otherwise (cancelled or failed, or no longer there)")
    says = f"{len(jobs):,} job(s) redriven under {put.incident} ({put.named}): " + ", ".join(said)
    if dead or other:
        return Verdict(False, says)
    return Verdict(True if not out else None, says)


def dead_letters_low(
    *,
    queue: str,
    taken: QueueSnapshot,
    threshold: int | None,
    declared: Count | None,
    put: PutBack,
) -> Verdict:
    """``taken``: the queue now; ``declared``: its count written down when the incident
    was declared."""
    actionable = taken.failed_actionable
    if actionable is not None and threshold is not None:
        said = f"{actionable:,} failed row(s) with an actionable reason now"
        if actionable <= threshold:
            return Verdict(True, f"{said}, at or below the alert's threshold of {threshold:,}")
        return Verdict(False, f"{said}, above the alert's threshold of {threshold:,}")
    nothing = _nothing(put)
    if nothing is not None:
        return Verdict(
            None,
            f"{nothing}; {queue} keeps no failure reasons to hold to the alert's threshold, "
            "so its dead letters are judged by what was redriven",
        )
    if declared is None:
        return Verdict(None, f"no count of {queue} was written down before {put.incident}")
    now = taken.dead_letters
    fell = declared.dead - now
    says = (
        f"{now:,} dead now, {declared.dead:,} at {declared.at:%H:%M} UTC, the last count "
        f"before {put.incident} was declared"
    )
    if fell >= put.jobs:
        return Verdict(
            True, f"{says}: down {fell:,}, at least the {put.jobs:,} job(s) redriven under it"
        )
    return Verdict(False, f"{says}; {put.jobs:,} job(s) redriven under it: not down by as many")


async def dead_letters_not_growing(
    conn: AsyncConnection, *, profile: QueueProfile, put: PutBack, now: datetime
) -> Verdict:
    if put.first is None:
        return Verdict(None, f"nothing was redriven under {put.incident} yet: no span to judge")
    since = f"since {put.incident} first put rows back ({put.first_by}, {put.first:%H:%M} UTC): "
    growth = await samples.dead_growth(conn, profile=profile, now=now, window=now - put.first)
    if growth.verdict == "unknown":
        return Verdict(None, since + growth.describe())
    says = since + growth.describe()
    if growth.verdict == "ok":
        return Verdict(True, says)
    if growth.died is not None:
        says += f"; {growth.died - growth.ours:,} of them counted as growth"
    return Verdict(False, says)
