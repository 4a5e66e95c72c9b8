"""The redrives queuebot made itself, read from its own tables: the jobs its plans
redrove (each plan item's wave says when) and the jobs its redrive requests changed (when
the request was executed). The dead-letter growth check (``samples.dead_growth``) does not
count a job that died again after queuebot redrove it as new growth.

The plan states are written here as the plans service stores them (``own_gauges`` holds
them; this layer may not import that service). Read-only steps in the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit.row_digest import ITEMS as CHANGE_ITEMS
from services.audit.row_digest import OUTCOMES
from services.db.tables import ChangeRequest, Plan, PlanItem
from services.estate.ops import CHUNK, chunks
from services.estate.profile import as_utc
from services.reads.own_gauges import REDRIVEN_JOB_STATES

_plans = cast(sa.Table, Plan.__table__)
_items = cast(sa.Table, PlanItem.__table__)
_requests = cast(sa.Table, ChangeRequest.__table__)
REDRIVE_KIND = "redrive"  # a request that redrives named jobs at once (ChangeKind.REDRIVE)
EXECUTED = "executed"


@dataclass(frozen=True)
class Redrove:
    """One job queuebot redrove: which row of it (where a job has several), when, and
    under what (``P-3``, ``CR-12``)."""

    job: str
    part: str | None
    at: datetime
    by: str


@dataclass(frozen=True)
class _Wave:
    plan: int
    number: int
    started_at: datetime
    finished_at: datetime | None


async def of_jobs(
    conn: AsyncConnection, *, queue: str, jobs: Collection[str]
) -> dict[str, list[Redrove]]:
    """Every redrive queuebot made of each of ``jobs`` on ``queue``, by job."""
    found: dict[str, list[Redrove]] = {}
    if not jobs:
        return found
    waves = {(w.plan, w.number): w for w in await _waves(conn, queue)}
    plans = sorted({plan for plan, _ in waves})
    requests = await _redrive_requests(conn, queue)
    for part in chunks(sorted(jobs), CHUNK):
        if plans:
            rows = await conn.execute(
                sa.select(
                    _items.c.plan_id, _items.c.wave, _items.c.job_id, _items.c.message_id
                ).where(
                    _items.c.plan_id.in_(plans),
                    _items.c.job_id.in_(part),
                    _items.c.state.in_(REDRIVEN_JOB_STATES),
                )
            )
            for plan, number, job, message in rows.all():
                wave = waves.get((int(plan), int(number)))
                if wave is not None:
                    found.setdefault(str(job), []).append(
                        Redrove(str(job), message, wave.started_at, f"P-{plan}")
                    )
        for r in await _changed(conn, requests, jobs=part):
            found.setdefault(r.job, []).append(r)
    return found


async def out_at(
    conn: AsyncConnection, *, queue: str, at: datetime, window: timedelta
) -> list[Redrove]:
    """The rows queuebot redrove before ``at`` that may still have been out of the dead
    letters then, as far as it knows: those of a plan's wave that had not finished by
    then (a finished wave's rows had all succeeded or died again), and those a redrive
    request changed within ``window`` before it (a request's rows are not followed, so
    they are taken as done one window after it)."""
    out: list[Redrove] = []
    unsettled = [
        w
        for w in await _waves(conn, queue)
        if w.started_at <= at and (w.finished_at is None or w.finished_at > at)
    ]
    for wave in unsettled:
        rows = await conn.execute(
            sa.select(_items.c.job_id, _items.c.message_id).where(
                _items.c.plan_id == wave.plan,
                _items.c.wave == wave.number,
                _items.c.state.in_(REDRIVEN_JOB_STATES),
            )
        )
        out.extend(
            Redrove(str(job), message, wave.started_at, f"P-{wave.plan}")
            for job, message in rows.all()
        )
    requests = await _redrive_requests(conn, queue)
    recent = {n: when for n, when in requests.items() if at - window < when <= at}
    out.extend(await _changed(conn, recent, jobs=None))
    return out


def named(redrives: Iterable[Redrove], most: int = 4) -> str:
    """The plans and requests that made ``redrives``, as a person reads them: "P-1, CR-4"."""
    refs = sorted({r.by for r in redrives}, key=lambda ref: (ref[0], int(ref.split("-")[1])))
    shown = ", ".join(refs[:most])
    return shown + (f" and {len(refs) - most} more" if len(refs) > most else "")


async def _waves(conn: AsyncConnection, queue: str) -> list[_Wave]:
    """Every wave of the queue's plans, with when it started and finished."""
    rows = await conn.execute(sa.select(_plans.c.id, _plans.c.waves).where(_plans.c.queue == queue))
    out: list[_Wave] = []
    for plan, data in rows.all():
        for wave in (data or {}).get("waves", []):
            started = _when(wave.get("started_at"))
            if started is not None:
                finished = _when(wave.get("finished_at"))
                out.append(_Wave(int(plan), int(wave["number"]), started, finished))
    return out


async def _redrive_requests(conn: AsyncConnection, queue: str) -> dict[int, datetime]:
    """The queue's executed redrive requests (named jobs, at once), with when each ran."""
    rows = await conn.execute(
        sa.select(_requests.c.id, _requests.c.decided_at).where(
            _requests.c.queue == queue,
            _requests.c.kind == REDRIVE_KIND,
            _requests.c.state == EXECUTED,
        )
    )
    return {int(n): at for n, when in rows.all() if (at := as_utc(when)) is not None}


async def _changed(
    conn: AsyncConnection, requests: Mapping[int, datetime], *, jobs: Collection[str] | None
) -> list[Redrove]:
    """The rows ``requests`` changed (of ``jobs``, when given): each request's items that
    have an outcome."""
    if not requests:
        return []
    joined = CHANGE_ITEMS.join(
        OUTCOMES,
        sa.and_(
            OUTCOMES.c.request_id == CHANGE_ITEMS.c.request_id,
            OUTCOMES.c.seq == CHANGE_ITEMS.c.seq,
        ),
    )
    query = (
        sa.select(CHANGE_ITEMS.c.request_id, CHANGE_ITEMS.c.job_id, CHANGE_ITEMS.c.part)
        .select_from(joined)
        .where(CHANGE_ITEMS.c.request_id.in_(sorted(requests)))
    )
    if jobs is not None:
        query = query.where(CHANGE_ITEMS.c.job_id.in_(list(jobs)))
    rows = await conn.execute(query)
    return [Redrove(str(job), part, requests[int(n)], f"CR-{n}") for n, job, part in rows.all()]


def _when(value: Any) -> datetime | None:
    """A time as a plan's waves JSON keeps it (ISO text)."""
    if value is None:
        return None
    return as_utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))
