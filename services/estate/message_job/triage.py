"""The message_job triage (``MessageJobTriage``, the profile's ``triage_reads``): the
queue's breakdowns (messages by status, jobs by status, the dead letters by their job's
status, by tenant and by error signature; the oldest pending message; the stuck and
duplicate counts) in a few statements an index can answer, read side by side."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import UsageError
from services.estate import estimate
from services.estate.at_once import read_named
from services.estate.message_job.job_states import JobStates
from services.estate.message_job.schema import UNFINISHED
from services.estate.model import (
    DEAD_LETTER_STATES,
    CanonicalState,
    Count,
    StatusCount,
    Triage,
    TypeCounts,
)
from services.estate.profile import QueueProfile, as_utc, count_map
from services.estate.signature import (
    SIGNATURE_SAMPLE,
    display_signature,
    top_of,
    top_signatures_of,
)
from services.estate.tables import BoundTable


class MessageJobTriage:
    """Triage of the messages, with their jobs."""

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile
        self.jobs = JobStates(profile)

    @staticmethod
    def _notes(t: Mapping[str, BoundTable]) -> list[str]:
        """What triage leaves out for lack of an optional column."""
        if not t["jobs"].has("tenant_id"):
            return ["no tenant_id column: no breakdown by tenant"]
        return []

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        t = await self.profile.tables(conn)
        if job_type is not None:
            grouped = (
                "its jobs are grouped by tenant (see /queue dlq --tenant T)"
                if t["jobs"].has("tenant_id")
                else "filter /queue dlq with --error-like TEXT"
            )
            raise UsageError(
                f"queue {self.profile.queue!r} (message_job) has no job types; {grouped}"
            )
        m, j = t["messages"], t["jobs"]
        where: list[sa.ColumnElement[bool]] = []
        if since is not None:
            where.append(m.c("available_at") >= since)
        status = m.c("status")
        dead = status.in_(self.profile.dead_letter_statuses)
        # On large tables the completed messages and succeeded jobs are estimated rather
        # than counted (services/estate/estimate.py); every other count is exact.
        plan_m, plan_j = (
            await estimate.plans(
                conn,
                [
                    (status, self.profile.statuses_in(CanonicalState.SUCCEEDED)),
                    (j.c("status"), self.jobs.statuses_in(CanonicalState.SUCCEEDED)),
                ],
            )
            if not exact and since is None
            else [None, None]
        )
        # Counts alone (an index-only scan of (status, available_at)); the oldest pending
        # message and the stuck count are two small index lookups beside them.
        if plan_m is not None:
            by_status = estimate.counts_except(m.table, status, [plan_m.status])
        else:
            by_status = sa.select(status, sa.func.count()).where(*where).group_by(status)
        extras = sa.select(
            self._oldest_pending(m, where).scalar_subquery(),
            sa.select(sa.func.count()).where(*self.stuck_where(t, now), *where).scalar_subquery(),
        )
        if plan_j is not None:
            by_job = estimate.counts_except(j.table, j.c("status"), [plan_j.status])
        elif since is None:
            by_job = sa.select(j.c("status"), sa.func.count()).group_by(j.c("status"))
        else:
            recent = sa.select(m.c("job_id")).where(*where)
            by_job = (
                sa.select(j.c("status"), sa.func.count())
                .where(j.c("id").in_(recent))
                .group_by(j.c("status"))
            )
        dead_jobs = self._dead_letter_jobs(m, j, [dead, *where])
        # Signatures and tenants of the newest dead letters, read backwards off the
        # (status, claimed_at) index with each tenant looked up by the job's primary key,
        # so the cost does not grow with the size of the DLQ; the reply says how many.
        tenant: sa.ColumnElement[Any] = (
            sa.select(j.c("tenant_id")).where(j.c("id") == m.c("job_id")).scalar_subquery()
            if j.has("tenant_id")
            else sa.null()
        )
        newest = (
            sa.select(m.c("last_error").label("error"), tenant.label("tenant"))
            .where(dead, *where)
            .order_by(m.c("claimed_at").desc())
            .limit(SIGNATURE_SAMPLE)
        )
        per_job = (
            sa.select(m.c("job_id"), sa.func.count().label("n"))
            .where(status.in_(self.profile.statuses_in(*UNFINISHED)), *where)
            .group_by(m.c("job_id"))
            .having(sa.func.count() > 1)
            .subquery()
        )
        dups = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(per_job.c.n - 1), 0))

        # The costliest reads get a connection each, the small ones share another: the
        # whole-table counts, or, where the succeeded rows are estimated, the dead
        # letters' jobs, the duplicates and the sample.
        read = await read_named(
            conn,
            {
                "status": by_status,
                "jobs": by_job,
                "dead": dead_jobs,
                "extras": extras,
                "newest": newest,
                "dups": dups,
            },
            heavy=("dead", "dups", "newest") if plan_m or plan_j else ("status", "jobs", "dead"),
        )
        status_rows, job_rows, dead_rows = read["status"], read["jobs"], read["dead"]
        extra_rows, sample, dup_rows = read["extras"], read["newest"], read["dups"]
        counts = count_map(status_rows)
        job_counts = count_map(job_rows)
        estimated = estimate.settle(plan_m, counts)
        jobs_estimated = estimate.settle(plan_j, job_counts)
        if (plan_m and not estimated) or (plan_j and not jobs_estimated):
            # statistics too stale to use (see estimate.settle): count everything
            return await self.triage(conn, now=now, since=since, job_type=job_type, exact=True)
        found = top_signatures_of(r[0] for r in sample)
        tenants = top_of(None if r[1] is None else str(r[1]) for r in sample)
        oldest_raw, stuck_total = extra_rows[0]
        dead_job_counts = count_map(dead_rows)
        n_groups, n_surplus = dup_rows[0]
        dead_total = self.profile.dead_count(counts)
        sampled = found.counted  # the newest SIGNATURE_SAMPLE dead letters, or all
        return Triage(
            queue=self.profile.queue,
            profile=self.profile.name,
            unit="messages",
            dead_title="Dead letters",
            duplicate_label="jobs with >1 unfinished message",
            taken_at=now,
            since=since,
            total=sum(counts.values()),
            status_title="message status",
            by_status=self._status_counts(
                counts, self.profile.canonical, plan_m if estimated else None
            ),
            by_job_status=self._status_counts(
                job_counts, self.jobs.canonical, plan_j if jobs_estimated else None
            ),
            dead_letter_jobs=self._status_counts(dead_job_counts, self.jobs.canonical),
            by_signature=[Count(display_signature(s), n) for s, n in found.rows],
            signatures_of=sampled,
            signatures_total=dead_total,
            signature_groups=found.groups,
            type_title="tenant",
            by_type_dead_only=True,
            # one count per tenant: its dead letters among those sampled (no per-state
            # columns, which would only repeat it)
            by_type=[TypeCounts(str(k), int(n), {}) for k, n in tenants.rows]
            if j.has("tenant_id")
            else [],
            type_groups=tenants.groups if j.has("tenant_id") else 0,
            oldest_pending_at=as_utc(oldest_raw),
            stuck=int(stuck_total or 0),
            duplicate_groups=int(n_groups),
            duplicate_rows=int(n_surplus),
            notes=self._notes(t),
        )

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        m = (await self.profile.tables(conn))["messages"]
        return as_utc((await conn.execute(self._oldest_pending(m, []))).scalar_one())

    def _oldest_pending(self, m: BoundTable, where: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
        """The oldest pending message's available_at: the top of the (status,
        available_at) index."""
        pending = m.c("status").in_(self.profile.statuses_in(CanonicalState.PENDING))
        return sa.select(sa.func.min(m.c("available_at"))).where(pending, *where)

    @staticmethod
    def _status_counts(
        counts: dict[str, int],
        canonical: Callable[[str], CanonicalState],
        estimated: estimate.Plan | None = None,
    ) -> list[StatusCount]:
        guessed = estimated.status if estimated is not None else None
        return [
            StatusCount(s, canonical(s), n, s == guessed)
            for s, n in sorted(counts.items(), key=lambda kv: -kv[1])
        ]

    def _dead_letter_jobs(
        self, m: BoundTable, j: BoundTable, where: list[sa.ColumnElement[bool]]
    ) -> sa.Select[Any]:
        """The dead letters by their job's status: what the headline's count is made of,
        beside the job table's own counts (a redrive takes those whose job FAILED).

        Nearly every dead letter's job has failed, so the dead letters are matched first
        against the failed jobs alone (two index-only ranges: the messages' (status,
        job_id), the jobs' (status, id)), and only a dead letter whose job is not among
        them looks its job up by primary key. A dead letter whose job row is gone is not
        counted here; one whose job has no status is, under no status."""
        letters = sa.select(m.c("job_id").label("job_id")).where(*where).subquery("letters")
        failed_statuses = self.jobs.statuses_in(*DEAD_LETTER_STATES)
        failed = (
            sa.select(j.c("id").label("id"), j.c("status").label("status"))
            .where(j.c("status").in_(failed_statuses))
            .subquery("failed")
        )
        other: sa.FromClause
        if m.dialect == "postgresql":  # looked up only for a letter the failed jobs missed
            other = (
                sa.select(j.c("status").label("status"), sa.true().label("found"))
                .where(j.c("id") == letters.c.job_id, failed.c.id.is_(None))
                # LIMIT keeps the planner from flattening this into a join with every job
                # (a scan of the jobs table); the id is the primary key, so it drops nothing
                .limit(1)
                .lateral("other")
            )
            on: sa.ColumnElement[bool] = sa.true()
        else:  # SQLite has no LATERAL; its tables are small
            jobs = j.table.alias("other_job")
            other = sa.select(
                jobs.c[j.c("id").name].label("id"),
                jobs.c[j.c("status").name].label("status"),
                sa.true().label("found"),
            ).subquery("other")
            on = sa.and_(other.c.id == letters.c.job_id, failed.c.id.is_(None))
        job_status = sa.func.coalesce(failed.c.status, other.c.status)
        return (
            sa.select(job_status, sa.func.count())
            .select_from(
                letters.outerjoin(failed, failed.c.id == letters.c.job_id).outerjoin(other, on)
            )
            .where(sa.or_(failed.c.id.is_not(None), other.c.found.is_not(None)))
            .group_by(job_status)
        )

    def stuck_where(
        self, tables: Mapping[str, BoundTable], now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        """In flight (PROCESSING) and claimed longer ago than the threshold."""
        m, profile = tables["messages"], self.profile
        return [
            m.c("status").in_(profile.statuses_in(CanonicalState.IN_FLIGHT)),
            m.c("claimed_at") < profile.stuck_cutoff(now),
        ]
