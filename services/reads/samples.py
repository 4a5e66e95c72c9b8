"""Queue counts written down periodically (the queue-loss runbook's "write the count down
before restarting", done for the operator), and the dead-letter growth check built on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import QueueSample
from services.estate.ops import CHUNK, Death, ItemRef, chunks
from services.estate.profile import QueueProfile, as_utc
from services.reads import gauges, own_redrives

_samples = cast(sa.Table, QueueSample.__table__)
KEEP = timedelta(days=14)
OLD_ENOUGH = timedelta(minutes=1)  # the youngest count a growth check compares with


def _written() -> sa.Select[tuple[str, datetime, int]]:
    """Each of the queues' newest count between ``since`` and ``at`` (built once)."""
    when = _samples.c.at.type
    newest = (
        sa.select(_samples.c.queue, sa.func.max(_samples.c.at).label("at"))
        .where(
            _samples.c.queue.in_(sa.bindparam("queues", expanding=True)),
            _samples.c.at <= sa.bindparam("at", type_=when),
            _samples.c.at >= sa.bindparam("since", type_=when),
        )
        .group_by(_samples.c.queue)
        .subquery()
    )
    return (
        sa.select(_samples.c.queue, _samples.c.at, _samples.c.dead)
        .join(newest, sa.and_(newest.c.queue == _samples.c.queue, newest.c.at == _samples.c.at))
        .order_by(_samples.c.id)
    )


_WRITTEN = _written()


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


async def dead_written(
    conn: AsyncConnection, *, queues: Sequence[str], at: datetime, within: timedelta
) -> dict[str, tuple[datetime, int]]:
    """Each queue's dead-letter count as last written down at or before ``at``, and when,
    where one was written in the ``within`` before it (one statement for every queue); a
    queue with none then is left out."""
    if not queues:
        return {}
    found = await conn.execute(_WRITTEN, {"queues": list(queues), "at": at, "since": at - within})
    written: dict[str, tuple[datetime, int]] = {}
    for queue, when, dead in found:
        taken = as_utc(when)
        assert taken is not None
        written[str(queue)] = (taken, int(dead))
    return written


@dataclass(frozen=True)
class Growth:
    """Whether the dead letters grew, and from what that was judged: the estate's own
    record of when rows died (``events``), two counts written down (``counts``), or
    nothing yet (``unknown``, with when a count will be old enough).

    Rows of jobs queuebot redrove itself that died again (``ours``, under ``by``: "P-1")
    are not counted as growth: what it took out of the dead letters came back."""

    verdict: Literal["ok", "growing", "unknown"]
    now: int
    before: int | None = None
    since: datetime | None = None
    died: int | None = None  # rows that died since ``since``, where the estate says
    retry_at: datetime | None = None
    ours: int = 0  # of those (or of the dead now), rows queuebot redrove that died again
    by: str = ""  # the plans and requests that redrove them
    clears_at: datetime | None = None  # growing: when what is counted is out of the window
    newest: datetime | None = None  # events: the newest death counted

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
            said = (
                f"{self.died:,} dead-lettered since {self.since:%H:%M UTC} (when the queue's "
                "own records say they died)"
            )
            if self.ours:
                whose = f"jobs queuebot redrove ({self.by}) that died again"
                said += (
                    f", all of them {whose}: not counted as growth"
                    if self.ours == self.died
                    else f", {self.ours:,} of them {whose}, not counted as growth"
                )
            return f"{said}; {self.now:,} dead now"
        assert self.before is not None
        change = self.now - self.before
        trend = f"+{change:,}" if change > 0 else f"{change:,}"
        said = f"{self.now:,} dead now, {self.before:,} at {self.since:%H:%M UTC} ({trend})"
        if self.ours and change > 0:
            said += (
                f"; {self.ours:,} of the dead now are jobs queuebot redrove ({self.by}) "
                f"that may have been out of the dead letters at {self.since:%H:%M UTC} and "
                "died again since"
            )
            counted = change - self.ours
            said += (
                ": the rise is not counted as growth"
                if counted <= 0
                else f", not counted: +{counted:,} counted as growth"
            )
        return said

    def when_clear(self, window: timedelta) -> str:
        """Growing: when the rows counted stop counting, and the setting that decides it."""
        minutes = round(window.total_seconds() / 60)
        setting = "[redrive] growth_window_minutes sets it"
        if self.clears_at is None:
            return f"the window is {minutes} min ({setting})"
        if self.newest is not None:
            return (
                f"retry after {self.clears_at:%H:%M UTC}, when the newest death counted "
                f"({self.newest:%H:%M:%S UTC}) has left the {minutes}-min window ({setting})"
            )
        return (
            f"retry after {self.clears_at:%H:%M UTC} at the latest, when the count compared "
            f"with is one written after the rise (a count at least {minutes} min old; "
            f"{setting})"
        )


async def dead_growth(
    conn: AsyncConnection, *, profile: QueueProfile, now: datetime, window: timedelta
) -> Growth:
    """Did dead letters grow over ``window``? Where the estate records when rows died
    (``PlanOps.dead_since``), any death in the window is growth but a job's that queuebot
    redrove before it died. Elsewhere the count now is compared with the newest sample at
    least ``window`` old, else the oldest one at least a minute old (so the span judged
    may differ from ``window``: ``Growth.minutes`` says), less the rows queuebot redrove
    that may have been out of the dead letters then and are dead again now."""
    counts = await profile.status_counts(conn)
    dead = profile.dead_count(counts)
    since = now - window
    died = await profile.plan_ops.dead_since(conn, since=since)
    if died is not None:
        return await _from_deaths(conn, profile, died, dead=dead, since=since, window=window)
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
    before, at = int(base[1]), as_utc(base[0])
    assert at is not None
    if dead <= before:
        return Growth("ok", dead, before, at)
    back = await _back_again(conn, profile, at=at, window=window)
    ours = len(back)
    if dead - before <= ours:
        return Growth("ok", dead, before, at, ours=ours, by=own_redrives.named(back))
    clears = await _count_clears(conn, profile, after=at, dead=dead, now=now, window=window)
    by = own_redrives.named(back)
    return Growth("growing", dead, before, at, ours=ours, by=by, clears_at=clears)


async def _from_deaths(
    conn: AsyncConnection,
    profile: QueueProfile,
    died: list[Death],
    *,
    dead: int,
    since: datetime,
    window: timedelta,
) -> Growth:
    """The growth the estate's record of deaths shows: each death counted but those of
    jobs queuebot had redrove before they died."""
    redrives = await own_redrives.of_jobs(conn, queue=profile.queue, jobs={d.job for d in died})
    ours: list[Death] = []
    counted: list[Death] = []
    by: list[own_redrives.Redrove] = []
    for death in died:
        earlier = [r for r in redrives.get(death.job, []) if r.at <= death.at]
        if earlier:
            ours.append(death)
            by.append(max(earlier, key=lambda r: r.at))
        else:
            counted.append(death)
    named = own_redrives.named(by)
    if not counted:
        return Growth("ok", dead, since=since, died=len(died), ours=len(ours), by=named)
    newest = max(d.at for d in counted)
    return Growth(
        "growing",
        dead,
        since=since,
        died=len(died),
        ours=len(ours),
        by=named,
        clears_at=_next_minute(newest + window),
        newest=newest,
    )


async def _back_again(
    conn: AsyncConnection, profile: QueueProfile, *, at: datetime, window: timedelta
) -> list[own_redrives.Redrove]:
    """The rows queuebot redrove that may have been out of the dead letters at ``at`` and
    are dead now (each row once)."""
    out = await own_redrives.out_at(conn, queue=profile.queue, at=at, window=window)
    rows = {(r.job, r.part): r for r in out}
    if not rows:
        return []
    refs = [ItemRef(job, part, {}) for job, part in rows]
    dead: set[tuple[str, str | None]] = set()
    for part in chunks(refs, CHUNK):
        status = await profile.plan_ops.wave_status(conn, items=list(part))
        dead_jobs = {job for job, _ in status.redead}
        dead.update((r.job_id, r.part) for r in part if r.job_id in dead_jobs)
    return [r for key, r in rows.items() if key in dead]


async def _count_clears(
    conn: AsyncConnection,
    profile: QueueProfile,
    *,
    after: datetime,
    dead: int,
    now: datetime,
    window: timedelta,
) -> datetime:
    """When a count compared with no longer shows this rise: a window after the first
    count written since ``after`` that shows as many dead, else a window after the next
    count (written every minute)."""
    first = (
        await conn.execute(
            sa.select(sa.func.min(_samples.c.at)).where(
                _samples.c.queue == profile.queue, _samples.c.at > after, _samples.c.dead >= dead
            )
        )
    ).scalar_one_or_none()
    shown = as_utc(first) or _next_minute(now) + OLD_ENOUGH
    return _next_minute(shown + window)


def _next_minute(at: datetime) -> datetime:
    """``at`` rounded up to a whole minute (what a person reads as "after HH:MM")."""
    whole = at.replace(second=0, microsecond=0)
    return whole if whole == at else whole + timedelta(minutes=1)
