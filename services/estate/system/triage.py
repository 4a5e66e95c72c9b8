"""A preset's triage (``SystemTriage``, every preset's ``triage_reads``): the system's jobs
by state and job type, the oldest waiting job, the stuck count and the newest dead jobs'
errors, read side by side in a few statements the system's own indexes answer (on a
large table the succeeded jobs are estimated, as on queuebot's own profiles, and where
the system deletes its successes the waiting jobs are counted from a sample of the
table's pages: services/estate/estimate.py). It reads the system's facts its preset declares
(``SystemBase``: ``state_value``, ``state_where``, ``waiting_since``, ``pass_source`` ...)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import UsageError
from services.estate import estimate
from services.estate.at_once import read_named
from services.estate.model import CanonicalState, Count, StatusCount, Triage, TypeCounts
from services.estate.profile import as_utc, plain
from services.estate.signature import display_signature, top_signatures_of
from services.estate.system.base import GONE, PendingIndex
from services.estate.system.triage_sql import COUNTS, ERRORS, TriageStatements
from services.estate.tables import BoundTable
from services.estate.triage import NO_TYPE

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase


# How triage reads the counts: the succeeded jobs estimated and the rest counted from the
# state index ("index") or in one pass ("one_pass"); or every job counted, by each derived
# state's condition ("by_condition") or grouped by the state ("grouped").
# Or, on a large table of a system that deletes its successes, its waiting jobs counted
# from a sample, the rest in one pass ("sampled").
Shape = Literal["index", "one_pass", "by_condition", "grouped", "sampled"]
# triage's counts by state and by job type (canonical state), the states estimated, how
# many jobs a sample read and each sampled state's error (one standard error, relative)
Tally = tuple[dict[str, int], dict[str, dict[CanonicalState, int]], set[str], int, dict[str, float]]


class SystemTriage:
    """Triage of a system's jobs table (its ``job`` role), one queue of it with ``queue_name``."""

    def __init__(self, profile: SystemBase) -> None:
        self.profile = profile
        self.sql = TriageStatements(profile)

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        profile = self.profile
        t = await profile.tables(conn)
        q = profile.job(t)
        cols = profile.cols
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
                raise UsageError(
                    f"{profile.system} keeps no job type: triage cannot select by --type"
                )
            where.append(q.c(cols.kind) == job_type)
        whole = not exact and not where
        plan = await self._plan_for(conn, t) if whole else None
        sample = await self._sample_for(conn, t) if whole and plan is None else None
        walk = await self._walk_for(conn, t) if sample is not None else None
        error = profile.error_text(t)
        shape: Shape = "sampled" if sample is not None else self._shape_of(plan)
        statements = self._reads(
            t, shape=shape, plan=plan, sample=sample, walk=walk, where=where, now=now, error=error
        )
        read = await read_named(conn, statements, heavy=("grouped",))
        rows, errors = self._unpack(shape, read)

        at = 2 if cols.kind is not None else 1  # the count's column
        tally = self._tally(rows, at, plan=plan, sample=sample, drawn=read.get("sample", ()))
        if tally is None:  # statistics too stale to use, or no job sampled: count all
            return await self.triage(conn, now=now, since=since, job_type=job_type, exact=True)
        counted, types, guessed, drawn, sample_errors = tally
        if "extras" in read:
            oldest_raw, stuck_total = read["extras"][0]
        else:
            waiting = [row[at + 1] for row in rows if row[at + 1] is not None]
            oldest_raw = min(waiting, default=None)
            stuck_total = sum(int(row[at + 2]) for row in rows)
        if "oldest" in read:
            oldest_raw = read["oldest"][0][0]
            pending = profile.statuses_in(CanonicalState.PENDING)
            if oldest_raw is None and any(counted.get(s) for s in pending):
                # the index read through a table the role may not see all of (row
                # security): read it the plain way, through what triage counted
                plain_way = self.sql.oldest_pending(t, where)
                oldest_raw = (await conn.execute(plain_way)).scalar_one()
        dead_total = sum(counted.get(s, 0) for s in profile.dead_letter_statuses)
        found = top_signatures_of(errors)
        rough = tuple(dict.fromkeys(profile.canonical(s) for s in sorted(guessed)))
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
                StatusCount(s, profile.canonical(s), n, s in guessed)
                for s, n in sorted(counted.items(), key=lambda kv: -kv[1])
            ],
            by_signature=[Count(display_signature(s), n) for s, n in found.rows],
            signatures_of=found.counted,  # the newest SIGNATURE_SAMPLE dead jobs, or all
            signatures_total=dead_total if error is not None else 0,
            signature_groups=found.groups,
            type_title="job type",
            by_type=[
                TypeCounts(
                    k,
                    sum(v.values()),
                    dict(v),
                    tuple(c for c in rough if v.get(c)) if sample is not None else (),
                )
                for k, v in sorted(types.items(), key=lambda kv: -sum(kv[1].values()))
            ],
            oldest_pending_at=as_utc(oldest_raw),
            stuck=int(stuck_total or 0),
            duplicates_detected=False,
            notes=self._notes(t),
            dead_states=profile.dead_letter_states,
            sampled_rows=drawn,
            sampled_of=sum(counted.values()) if sample is not None else 0,
            sampled_percent=sample.percent if sample is not None else 0.0,
            sample_errors=sample_errors,
        )

    def _tally(
        self,
        rows: Sequence[Any],
        at: int,
        *,
        plan: estimate.Plan | None,
        sample: estimate.Sample | None,
        drawn: Sequence[Any] = (),
    ) -> Tally | None:
        """The counts by state and by job type from the grouped rows (``(state, *type,
        count, ...)``, the count at ``at``), the states estimated, how many jobs a sample
        read and each sampled state's error: a plan's succeeded count settled, or the
        sample's rows (``drawn``: ``_sampled``'s) scaled to the table, each count whole
        (not summed from rounded parts). None where the statistics are too stale to use,
        or the sample read no job of a table they say is large."""
        profile = self.profile
        counted: dict[str, int] = defaultdict(int)
        types: dict[str, dict[CanonicalState, int]] = defaultdict(lambda: defaultdict(int))
        for row in rows:
            name, n = str(plain(row[0])), int(row[at])
            counted[name] += n
            if profile.cols.kind is not None:
                kind = str(plain(row[1])) if row[1] is not None else NO_TYPE
                types[kind][profile.canonical(name)] += n
        if sample is None:
            if estimate.settle(plan, counted):
                return counted, types, {plan.status} if plan is not None else set(), 0, {}
            return None if plan is not None else (counted, types, set(), 0, {})
        exactly = set(self._counted_whole())
        read = sum(int(r[3]) for r in drawn if r[0] == "k")
        if not read:
            return None
        seen: dict[str, int] = defaultdict(int)
        seen_types: dict[str, dict[CanonicalState, int]] = defaultdict(lambda: defaultdict(int))
        errors: dict[str, float] = {}
        for part, state, kind, n, squares in drawn:
            name = str(plain(state))
            if name in exactly:
                continue  # counted whole by the pass
            if part == "s":
                errors[name] = sample.error(int(n), int(squares))
                continue
            seen[name] += int(n)
            if profile.cols.kind is not None:
                key = str(plain(kind)) if kind is not None else NO_TYPE
                seen_types[key][profile.canonical(name)] += int(n)
        for name, n in seen.items():
            counted[name] += sample.scaled(n)
        for key, cells in seen_types.items():
            for canonical, n in cells.items():
                types[key][canonical] += sample.scaled(n)
        return counted, types, set(seen), read, errors

    def _counted_whole(self) -> list[str]:
        """The states a sampled triage still counts exactly, in one pass: the dead jobs and
        the running ones (whose stuck count is exact, and which are few)."""
        profile = self.profile
        running = profile.statuses_in(CanonicalState.IN_FLIGHT)
        return [s for s in (*profile.dead_letter_statuses, *running) if s != GONE]

    async def _sample_for(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable]
    ) -> estimate.Sample | None:
        """On a system that deletes its successes, every job in its table is one an
        operator may act on, and a large table is a backlog: its waiting jobs are counted
        from a sample of them where the statistics put 500,000 jobs or more in it."""
        profile = self.profile
        if not profile.success_deletes or not profile.derived_states:
            return None
        return await estimate.sample_plan(conn, profile.sample_table(t))

    async def _walk_for(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable]
    ) -> PendingIndex | None:
        """The system's index of its pending jobs, where it declares one and the table has
        it (valid): the oldest waiting job is then read from it in a few descents."""
        index = self.profile.oldest_pending_index(t)
        if index is None:
            return None
        columns = [c.name for c in (*index.prefix, index.since)]
        return index if await estimate.partial_index_leads(conn, index.table, columns) else None

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        t = await self.profile.tables(conn)
        scope = self.profile.scope(t)
        walk = await self._walk_for(conn, t) if not scope else None
        query = (
            self.sql.oldest_walked(walk) if walk is not None else self.sql.oldest_pending(t, scope)
        )
        return as_utc((await conn.execute(query)).scalar_one())

    def stuck_where(
        self, tables: Mapping[str, BoundTable], now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        """Running jobs whose attempt started before the queue's stuck threshold."""
        profile = self.profile
        started = profile.started_at(tables)
        running = profile.in_states(tables, profile.statuses_in(CanonicalState.IN_FLIGHT))
        if started is None:
            return [running, sa.false()]
        return [running, started < profile.stuck_cutoff(now), *profile.scope(tables)]

    async def _plan_for(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable]
    ) -> estimate.Plan | None:
        """How a triage of the whole table estimates its succeeded jobs, if it does: from the
        index on the state column, or in one pass where the statistics say most jobs
        succeeded (a state column's, or on a system without one, its ``set_on_success``
        column's). None where succeeded jobs are deleted, or counting them costs little."""
        profile = self.profile
        q = profile.job(t)
        succeeded = [s for s in profile.statuses_in(CanonicalState.SUCCEEDED) if s != GONE]
        if not profile.derived_states:
            (plan,) = await estimate.plans(conn, [(q.c(profile.cols.state), succeeded)], scan=True)
            return plan
        if profile.success_deletes or profile.set_on_success is None or len(succeeded) != 1:
            return None
        return await estimate.scan_plan(
            conn,
            q.table,
            status=succeeded[0],
            succeeded=profile.state_where(t, succeeded[0]),
            set_on_success=profile.set_on_success,
        )

    def _shape_of(self, plan: estimate.Plan | None) -> Shape:
        if plan is not None:
            return "index" if plan.indexed else "one_pass"
        if self.profile.derived_states:
            return "by_condition"
        return "grouped"

    def _unpack(
        self, shape: Shape, read: Mapping[str, Sequence[Any]]
    ) -> tuple[Sequence[Any], list[Any]]:
        """The grouped rows ``(state, *type, count, ...)`` and the newest dead jobs' errors,
        from what the statements of ``shape`` read."""
        rows = read["grouped"]
        if shape in ("one_pass", "sampled"):  # its rows tagged counts or errors
            errors = [e for r in rows if r[0] == ERRORS for e in (r[-1] or ())]
            return [r[1:] for r in rows if r[0] == COUNTS], errors
        errors = [r[0] for r in read.get("newest", [])]
        return (self.sql.spread(rows) if shape == "by_condition" else rows), errors

    def _reads(
        self,
        t: Mapping[str, BoundTable],
        *,
        shape: Shape,
        plan: estimate.Plan | None,
        sample: estimate.Sample | None,
        walk: PendingIndex | None,
        where: list[sa.ColumnElement[bool]],
        now: datetime,
        error: sa.ColumnElement[Any] | None,
    ) -> dict[str, Any]:
        """Triage's statements by name: ``grouped`` (the counts, the heaviest), and beside it
        ``extras`` (oldest waiting, stuck) and ``newest`` (the dead jobs' errors) where the
        counts do not bring them; where the backlog is sampled, ``sample`` (its counts)
        and ``oldest`` (the oldest waiting job, which no sample can tell)."""
        profile = self.profile
        q = profile.job(t)
        cols = profile.cols
        state = profile.state_value(t)
        groups = [q.c(cols.kind)] if cols.kind is not None else []
        stuck = self.stuck_where(t, now)
        statements: dict[str, Any] = {}
        if shape == "sampled" and sample is not None:
            # the dead and running jobs counted exactly (with the dead ones' errors and
            # the stuck count) in one pass; the rest from a sample of the table's pages;
            # the oldest waiting job from the system's index of them, where it has one
            few = profile.in_states(t, self._counted_whole())
            statements["grouped"] = self.sql.one_pass(t, few, profile.stuck_cutoff(now))
            statements["sample"] = self.sql.sampled(t, sample)
            statements["oldest"] = (
                self.sql.oldest_walked(walk)
                if walk is not None
                else self.sql.oldest_pending(t, where)
            )
        elif shape == "one_pass" and plan is not None:
            kept = profile.not_succeeded(t, plan.status)
            statements["grouped"] = self.sql.one_pass(t, kept, profile.stuck_cutoff(now))
        elif shape == "index" and plan is not None:
            statements["grouped"] = estimate.counts_except(
                q.table, q.c(cols.state), [plan.status], group=groups
            )
            statements["extras"] = sa.select(
                self.sql.oldest_pending(t, where).scalar_subquery(),
                sa.select(sa.func.count())
                .select_from(q.table)
                .where(*stuck, *where)
                .scalar_subquery(),
            )
        elif shape == "by_condition":
            statements["grouped"] = self.sql.by_condition(t, where, profile.stuck_cutoff(now))
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
        if error is not None and shape not in ("one_pass", "sampled"):
            statements["newest"] = self.sql.newest_errors(t, error, where)
        return statements

    def _notes(self, t: Mapping[str, BoundTable]) -> list[str]:
        profile = self.profile
        out = []
        if profile.error_text(t) is None:
            out.append(f"no error signatures: {profile.no_error_text}")
        if profile.config.queue_name is not None:
            out.append(
                f"jobs of {profile.job(t).name}'s other queues (this queue is its "
                f"{profile.config.queue_name!r} alone: queue_name)"
            )
        return out
