"""Queue counts written down periodically (the queue-loss runbook's "write the count down
before restarting", done for the operator), and the dead-letter growth check built on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.model import CanonicalState
from services.estate.profile import QueueProfile, as_utc
from services.models import QueueSample

_samples = cast(sa.Table, QueueSample.__table__)
KEEP = timedelta(days=14)


async def record(conn: AsyncConnection, *, profile: QueueProfile, now: datetime) -> int:
    """Count the queue by status and store it; return the dead-letter count."""
    counts = await profile.status_counts(conn)
    dead = profile.dead_count(counts)
    pending = sum(counts.get(s, 0) for s in profile.statuses_in(CanonicalState.PENDING))
    await conn.execute(
        _samples.insert().values(
            queue=profile.queue,
            at=now,
            total=sum(counts.values()),
            dead=dead,
            pending=pending,
            counts=counts,
        )
    )
    await conn.execute(
        _samples.delete().where(_samples.c.queue == profile.queue, _samples.c.at < now - KEEP)
    )
    return dead


@dataclass(frozen=True)
class Growth:
    verdict: Literal["ok", "growing", "unknown"]
    now: int
    before: int | None = None
    since: datetime | None = None

    def describe(self) -> str:
        if self.verdict == "unknown":
            return (
                f"{self.now:,} dead now; no earlier count recorded yet (queuebot writes "
                "the counts down every minute)"
            )
        assert self.before is not None and self.since is not None
        change = self.now - self.before
        trend = f"+{change:,}" if change > 0 else f"{change:,}"
        return (
            f"{self.now:,} dead now, {self.before:,} at "
            f"{self.since.strftime('%H:%M UTC')} ({trend})"
        )


async def dead_growth(
    conn: AsyncConnection, *, profile: QueueProfile, now: datetime, window: timedelta
) -> Growth:
    """Is the dead-letter count higher now than ``window`` ago? Compares with the newest
    sample at least ``window`` old, else the oldest one at least a minute old."""
    counts = await profile.status_counts(conn)
    dead = profile.dead_count(counts)
    base = (
        await conn.execute(
            sa.select(_samples.c.at, _samples.c.dead)
            .where(_samples.c.queue == profile.queue, _samples.c.at <= now - window)
            .order_by(_samples.c.at.desc())
            .limit(1)
        )
    ).first()
    if base is None:
        base = (
            await conn.execute(
                sa.select(_samples.c.at, _samples.c.dead)
                .where(
                    _samples.c.queue == profile.queue, _samples.c.at <= now - timedelta(minutes=1)
                )
                .order_by(_samples.c.at)
                .limit(1)
            )
        ).first()
    if base is None:
        return Growth("unknown", dead)
    before = int(base[1])
    return Growth("growing" if dead > before else "ok", dead, before, as_utc(base[0]))
