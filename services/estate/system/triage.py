"""A preset's triage: the system's jobs by state and job type, the oldest waiting job,
the stuck count and the newest dead jobs' errors, read side by side in a few statements
the system's own indexes answer (on a large table the succeeded jobs are estimated, as
on queuebot's own profiles: services/estate/estimate.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import UsageError
from services.estate import estimate
from services.estate.at_once import read_named
from services.estate.model import CanonicalState, Count, StatusCount, Triage, TypeCounts
from services.estate.profile import as_utc, plain
from services.estate.signature import SIGNATURE_SAMPLE, display_signature, top_signatures
from services.estate.tables import BoundTable

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase

NO_TYPE = "(no job type)"


async def triage(
    profile: SystemBase,
    conn: AsyncConnection,
    *,
    now: datetime,
    since: datetime | None,
    job_type: str | None,
    exact: bool = False,
) -> Triage:
    t = await profile.tables(conn)
    q = profile.job(t)
    cols = profile.cols
    state = profile.state_value(t)
    where: list[sa.ColumnElement[bool]] = list(profile.scope(t))
    if since is not None:
        enqueued = profile.enqueued_at(t)
        if enqueued is None:
            raise UsageError(
                f"{profile.system} keeps no enqueue time: triage cannot select by --since"
            )
        where.append(enqueued >= since)
    if job_type is not None:
        if cols.kind is None:
            raise UsageError(f"{profile.system} keeps no job type: triage cannot select by --type")
        where.append(q.c(cols.kind) == job_type)
    whole = not exact and not where and not profile.derived_states
    (plan,) = (
        await estimate.plans(
            conn, [(q.c(cols.state), profile.statuses_in(CanonicalState.SUCCEEDED))]
        )
        if whole
        else [None]
    )
    groups = [q.c(cols.kind)] if cols.kind is not None else []
    stuck = profile.stuck_where(t, profile.stuck_cutoff(now))
    statements: dict[str, Any] = {}
    if plan is not None:
        statements["grouped"] = estimate.counts_except(
            q.table, q.c(cols.state), [plan.status], group=groups
        )
        statements["extras"] = sa.select(
            oldest_pending(profile, t, where).scalar_subquery(),
            sa.select(sa.func.count()).select_from(q.table).where(*stuck, *where).scalar_subquery(),
        )
    else:
        # Every row is read for the counts: the oldest waiting job and the stuck count
        # come from the same pass. Apart, each is a pass of its own over a table whose
        # state no index leads with (pg-boss's: three scans instead of one).
        pending = state.in_(profile.statuses_in(CanonicalState.PENDING))
        statements["grouped"] = (
            sa.select(
                state,
                *groups,
                sa.func.count(),
                sa.func.min(profile.waiting_since(t)).filter(pending),
                sa.func.count().filter(sa.and_(*stuck)),
            )
            .select_from(q.table)
            .where(*where)
            .group_by(state, *groups)
        )
    error = profile.error_text(t)
    if error is not None:
        statements["newest"] = newest_errors(profile, t, error, where)
    read = await read_named(conn, statements, heavy=("grouped",))

    counted: dict[str, int] = defaultdict(int)
    types: dict[str, dict[CanonicalState, int]] = defaultdict(lambda: defaultdict(int))
    at = len(groups) + 1  # the count's column
    for row in read["grouped"]:
        name = str(plain(row[0]))
        n = int(row[at])
        counted[name] += n
        if groups:
            kind = str(plain(row[1])) if row[1] is not None else NO_TYPE
            types[kind][profile.canonical(name)] += n
    estimated = estimate.settle(plan, counted)
    if plan is not None and not estimated:  # statistics too stale to use: count all
        return await triage(profile, conn, now=now, since=since, job_type=job_type, exact=True)
    guessed = plan.status if estimated and plan is not None else None
    if plan is not None:
        oldest_raw, stuck_total = read["extras"][0]
    else:
        waiting = [row[at + 1] for row in read["grouped"] if row[at + 1] is not None]
        oldest_raw = min(waiting, default=None)
        stuck_total = sum(int(row[at + 2]) for row in read["grouped"])
    dead_total = sum(counted.get(s, 0) for s in profile.dead_letter_statuses)
    errors = [r[0] for r in read.get("newest", [])]
    return Triage(
        queue=profile.queue,
        profile=profile.name,
        unit="jobs",
        dead_title="Dead jobs",
        taken_at=now,
        since=since,
        total=sum(counted.values()),
        status_title=f"{profile.system} state",
        by_status=[
            StatusCount(s, profile.canonical(s), n, s == guessed)
            for s, n in sorted(counted.items(), key=lambda kv: -kv[1])
        ],
        by_signature=[Count(display_signature(s), n) for s, n in top_signatures(errors)],
        signatures_of=min(dead_total, SIGNATURE_SAMPLE) if error is not None else 0,
        signatures_total=dead_total if error is not None else 0,
        type_title="job type",
        by_type=[
            TypeCounts(k, sum(v.values()), dict(v))
            for k, v in sorted(types.items(), key=lambda kv: -sum(kv[1].values()))
        ],
        oldest_pending_at=as_utc(oldest_raw),
        stuck=int(stuck_total or 0),
        duplicates_detected=False,
        notes=notes(profile, t),
        dead_states=profile.dead_letter_states,
    )


def notes(profile: SystemBase, t: Mapping[str, BoundTable]) -> list[str]:
    out = []
    if profile.error_text(t) is None:
        out.append(f"no error signatures: {profile.no_error_text}")
    if profile.config.queue_name is not None:
        out.append(
            f"jobs of {profile.job(t).name}'s other queues (this queue is its "
            f"{profile.config.queue_name!r} alone: queue_name)"
        )
    return out


def oldest_pending(
    profile: SystemBase,
    t: Mapping[str, BoundTable],
    where: list[sa.ColumnElement[bool]],
) -> sa.Select[Any]:
    """Since when the longest-waiting job could have run: the earliest time a pending job
    became runnable (where only jobs scheduled for later are pending, that time is ahead
    and the age reads as none)."""
    q = profile.job(t)
    since = profile.waiting_since(t)
    pending = profile.in_states(t, profile.statuses_in(CanonicalState.PENDING))
    return sa.select(sa.func.min(since)).select_from(q.table).where(pending, *where)


def newest_errors(
    profile: SystemBase,
    t: Mapping[str, BoundTable],
    error: sa.ColumnElement[Any],
    where: list[sa.ColumnElement[bool]],
) -> sa.Select[Any]:
    """The error texts of the newest dead jobs, whose signatures the reply counts."""
    q = profile.job(t)
    return (
        sa.select(error)
        .select_from(q.table)
        .where(profile.in_states(t, profile.dead_letter_statuses), *where)
        .order_by(*profile.dead_order(dict(t)))
        .limit(SIGNATURE_SAMPLE)
    )
