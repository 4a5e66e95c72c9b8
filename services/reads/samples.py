"""Queue counts written down periodically (the queue-loss runbook's "write the count down
before restarting", done for the operator), and the dead-letter growth check built on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.profile import QueueProfile, as_utc
from services.models import QueueSample
from services.reads import gauges

_samples = cast(sa.Table, QueueSample.__table__)
KEEP = timedelta(days=14)
OLD_ENOUGH = timedelta(minutes=1)  # the youngest count a growth check compares with


async def record(conn: AsyncConnection, *, profile: QueueProfile, now: datetime) -> int:
    """Read the queue's gauges and store them; return the dead-letter count. Beside the
    counts by status, ``detail`` keeps the counts by canonical state, the failed rows by
    failure reason and how many of them are actionable, and the oldest pending row
    (``QueueSnapshot.detail``), so checks over time need no other read of the queue."""
    taken = await gauges.snapshot(conn, profile=profile, now=now)
    await conn.execute(
        _samples.insert().values(
            queue=profile.queue,
            at=now,
            total=taken.total,
            dead=taken.dead_letters,
            pending=taken.pending,
            counts=dict(taken.by_status),
            detail=taken.detail(),
        )
    )
    await conn.execute(
        _samples.delete().where(_samples.c.queue == profile.queue, _samples.c.at < now - KEEP)
    )
    return taken.dead_letters


@dataclass(frozen=True)
class Growth:
    """Whether the dead letters grew, and from what that was judged: the estate's own
    record of when rows died (``events``), two counts written down (``counts``), or
    nothing yet (``unknown``, with when a count will be old enough)."""

    verdict: Literal["ok", "growing", "unknown"]
    now: int
    before: int | None = None
    since: datetime | None = None
    died: int | None = None  # rows that died since ``since``, where the estate says
    retry_at: datetime | None = None

    @property
    def source(self) -> Literal["events", "counts", "unknown"]:
        if self.verdict == "unknown":
            return "unknown"
        return "events" if self.died is not None else "counts"

    def minutes(self, now: datetime) -> int | None:
        """The span the verdict covers, in whole minutes (None when there is none)."""
        if self.since is None:
            return None
        return max(1, round((now - self.since).total_seconds() / 60))

    def describe(self) -> str:
        if self.verdict == "unknown":
            retry = f"{self.retry_at:%H:%M UTC}" if self.retry_at else "a minute"
            return (
                f"{self.now:,} dead now and no earlier count yet: keep queuebot running; the "
                f"first count is written at start and every minute; retry after {retry}"
            )
        assert self.since is not None
        if self.died is not None:
            return (
                f"{self.died:,} dead-lettered since {self.since:%H:%M UTC} (when the queue's "
                f"own records say they died); {self.now:,} dead now"
            )
        assert self.before is not None
        change = self.now - self.before
        trend = f"+{change:,}" if change > 0 else f"{change:,}"
        return f"{self.now:,} dead now, {self.before:,} at {self.since:%H:%M UTC} ({trend})"


async def dead_growth(
    conn: AsyncConnection, *, profile: QueueProfile, now: datetime, window: timedelta
) -> Growth:
    """Did dead letters grow over ``window``? Where the estate records when rows died
    (``PlanOps.dead_since``), any death in the window is growth. Elsewhere the count now is
    compared with the newest sample at least ``window`` old, else the oldest one at least a
    minute old (so the span judged may differ from ``window``: ``Growth.minutes`` says)."""
    counts = await profile.status_counts(conn)
    dead = profile.dead_count(counts)
    since = now - window
    died = await profile.plan_ops.dead_since(conn, since=since)
    if died is not None:
        return Growth("growing" if died > 0 else "ok", dead, since=since, died=died)
    base = (
        await conn.execute(
            sa.select(_samples.c.at, _samples.c.dead)
            .where(_samples.c.queue == profile.queue, _samples.c.at <= since)
            .order_by(_samples.c.at.desc())
            .limit(1)
        )
    ).first()
    if base is None:
        base = (
            await conn.execute(
                sa.select(_samples.c.at, _samples.c.dead)
                .where(_samples.c.queue == profile.queue, _samples.c.at <= now - OLD_ENOUGH)
                .order_by(_samples.c.at)
                .limit(1)
            )
        ).first()
    if base is None:
        first = (
            await conn.execute(
                sa.select(sa.func.min(_samples.c.at)).where(_samples.c.queue == profile.queue)
            )
        ).scalar_one_or_none()
        ready = (as_utc(first) or now) + OLD_ENOUGH
        return Growth("unknown", dead, retry_at=_next_minute(ready))
    before = int(base[1])
    return Growth("growing" if dead > before else "ok", dead, before, as_utc(base[0]))


def _next_minute(at: datetime) -> datetime:
    """``at`` rounded up to a whole minute (what a person reads as "after HH:MM")."""
    whole = at.replace(second=0, microsecond=0)
    return whole if whole == at else whole + timedelta(minutes=1)
