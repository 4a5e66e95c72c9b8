"""The ``worker_queue`` profile: one table like ``dev_r_worker_queue``, where a row is a
job and its status says where it is (queued, claimed, running, done, failed,
failed_permanently, cancelled). This module reads it; ``changes`` and ``plans`` write it."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.errors import NotFound, UsageError
from services.estate.model import (
    CanonicalState,
    Count,
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobList,
    JobSummary,
    Section,
    StatusCount,
    Triage,
    TypeCounts,
)
from services.estate.profile import (
    BoundTable,
    IndexPlan,
    QueueProfile,
    TableSpec,
    as_utc,
    plain,
    row_dict,
)
from services.estate.signature import SIGNATURE_SAMPLE, display_signature, signature_sql
from services.estate.worker_queue.changes import WorkerQueueChanges
from services.estate.worker_queue.plans import WorkerQueuePlanOps
from services.estate.worker_queue.schema import ACTIVE, FAILURE_REASONS


class WorkerQueueProfile(QueueProfile):
    name = "worker_queue"
    specs = (
        TableSpec(
            "queue",
            "dev_r_worker_queue",
            (
                "id",
                "issue_number",
                "github_issue_number",
                "job_type",
                "status",
                "failure_reason",
                "error_message",
                "retry_count",
                "max_retries",
                "queued_at",
                "next_attempt_at",
                "server_node",
                "server_preference",
                "claimed_at",
                "started_at",
                "heartbeat_at",
                "analyst_notes",
            ),
        ),
    )
    states = {
        "queued": CanonicalState.PENDING,
        "claimed": CanonicalState.IN_FLIGHT,
        "running": CanonicalState.IN_FLIGHT,
        "done": CanonicalState.SUCCEEDED,
        "failed": CanonicalState.FAILED,
        "failed_permanently": CanonicalState.DEAD,
        "cancelled": CanonicalState.CANCELLED,
    }

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self.changes = WorkerQueueChanges(self)
        self.plan_ops = WorkerQueuePlanOps(self)

    def index_plan(self) -> list[IndexPlan]:
        return [
            (
                "queue",
                "status_reason_type",
                ("status", "failure_reason", "job_type"),
                None,
                "triage breakdowns as an index-only scan; /queue dlq --reason",
            ),
            (
                "queue",
                "status_queued_at",
                ("status", "queued_at"),
                None,
                "oldest pending row, --since windows, newest-first listings",
            ),
            (
                "queue",
                "issue_status",
                ("issue_number", "status"),
                None,
                "duplicate queued rows and /queue show siblings",
            ),
            (
                "queue",
                "in_flight_claimed",
                ("status", "claimed_at"),
                ("status", ("claimed", "running")),
                "stuck rows (claimed or running with no sign of life)",
            ),
        ]

    def _stuck_condition(self, q: BoundTable, cutoff: datetime) -> sa.ColumnElement[bool]:
        # Stuck: claimed but never started and no heartbeat; or running with a stale beat.
        claimed = sa.and_(
            q.c("status") == "claimed",
            q.c("started_at").is_(None),
            q.c("heartbeat_at").is_(None),
            q.c("claimed_at") < cutoff,
        )
        running = sa.and_(
            q.c("status") == "running",
            sa.func.coalesce(q.c("heartbeat_at"), q.c("started_at"), q.c("claimed_at")) < cutoff,
        )
        return sa.or_(claimed, running)

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
    ) -> Triage:
        q = (await self.tables(conn))["queue"]
        where: list[sa.ColumnElement[bool]] = []
        if since is not None:
            where.append(q.c("queued_at") >= since)
        if job_type is not None:
            where.append(q.c("job_type") == job_type)
        status, queued_at = q.c("status"), q.c("queued_at")
        # Counts alone, so an index on (status, failure_reason, job_type) answers them
        # without reading the table; the oldest pending row and the stuck count are two
        # small index lookups beside it.
        grouped = (
            sa.select(status, q.c("failure_reason"), q.c("job_type"), sa.func.count())
            .where(*where)
            .group_by(status, q.c("failure_reason"), q.c("job_type"))
        )
        extras = sa.select(
            sa.select(sa.func.min(queued_at)).where(status == "queued", *where).scalar_subquery(),
            sa.select(sa.func.count())
            .where(self._stuck_condition(q, self.stuck_cutoff(now)), *where)
            .scalar_subquery(),
        )
        rows = (await conn.execute(grouped)).all()
        oldest_raw, stuck_total = (await conn.execute(extras)).one()
        sig_rows = (await conn.execute(self._signatures(q, where, conn.dialect.name))).all()
        dup_groups, dup_rows, dup_active = await self._duplicate_counts(conn, q, where)

        status_counts: dict[str, int] = defaultdict(int)
        reasons: dict[str, int] = defaultdict(int)
        types: dict[str, dict[CanonicalState, int]] = defaultdict(lambda: defaultdict(int))
        for raw_status, reason, jtype, count in rows:
            name = str(plain(raw_status))
            status_counts[name] += count
            if name in self.dead_letter_statuses:
                reasons[str(plain(reason)) if reason is not None else "(none)"] += count
            types[str(jtype)][self.canonical(name)] += count
        oldest = as_utc(oldest_raw)
        dead_total = sum(status_counts.get(s, 0) for s in self.dead_letter_statuses)
        return Triage(
            queue=self.queue,
            profile=self.name,
            unit="jobs",
            dead_title="Failed",
            duplicate_label="issues queued twice",
            taken_at=now,
            since=since,
            total=sum(status_counts.values()),
            status_title="status",
            by_status=[
                StatusCount(s, self.canonical(s), n)
                for s, n in sorted(status_counts.items(), key=lambda kv: -kv[1])
            ],
            by_reason=[Count(k, n) for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])],
            by_signature=[Count(display_signature(s), int(n)) for s, n in sig_rows],
            signatures_of=min(dead_total, SIGNATURE_SAMPLE),
            signatures_total=dead_total,
            type_title="job type",
            by_type=[
                TypeCounts(k, sum(v.values()), dict(v))
                for k, v in sorted(types.items(), key=lambda kv: -sum(kv[1].values()))
            ],
            oldest_pending_at=oldest,
            stuck=int(stuck_total or 0),
            duplicate_groups=dup_groups,
            duplicate_rows=dup_rows,
            duplicates_of_active=dup_active,
        )

    def _signatures(
        self, q: BoundTable, where: list[sa.ColumnElement[bool]], dialect: str
    ) -> sa.Select[Any]:
        """Top signatures among the newest failed rows: each dead status's newest rows
        come straight off the (status, queued_at) index, so the cost does not grow with
        the size of the failure pile; the reply says how many rows the breakdown covers."""
        status, queued_at = q.c("status"), q.c("queued_at")
        parts = []
        for dead in self.dead_letter_statuses:
            newest = (
                sa.select(q.c("error_message").label("error"), queued_at.label("at"))
                .where(status == dead, *where)
                .order_by(queued_at.desc())
                .limit(SIGNATURE_SAMPLE)
                .subquery()
            )
            parts.append(sa.select(newest.c.error, newest.c.at))
        pool = sa.union_all(*parts).subquery()
        sample = (
            sa.select(pool.c.error).order_by(pool.c.at.desc()).limit(SIGNATURE_SAMPLE).subquery()
        )
        sig = signature_sql(sample.c.error, dialect).label("sig")
        return (
            sa.select(sig, sa.func.count())
            .group_by(sig)
            .order_by(sa.func.count().desc(), sig)
            .limit(10)
        )

    async def _duplicate_counts(
        self, conn: AsyncConnection, q: BoundTable, where: list[sa.ColumnElement[bool]]
    ) -> tuple[int, int, int]:
        queued = [q.c("status") == "queued", q.c("issue_number").is_not(None), *where]
        per_issue = (
            sa.select(q.c("issue_number"), sa.func.count().label("n"))
            .where(*queued)
            .group_by(q.c("issue_number"))
            .having(sa.func.count() > 1)
            .subquery()
        )
        groups = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(per_issue.c.n - 1), 0))
        other = q.table.alias("active")
        active_issue = sa.exists().where(
            other.c[q.c("issue_number").name] == q.c("issue_number"),
            other.c[q.c("status").name].in_(ACTIVE),
        )
        beside_active = sa.select(sa.func.count()).where(*queued, active_issue)
        n_groups, n_rows = (await conn.execute(groups)).one()
        n_active = (await conn.execute(beside_active)).scalar_one()
        return int(n_groups), int(n_rows), int(n_active)

    async def show(self, conn: AsyncConnection, *, job_id: str) -> JobDetail:
        q = (await self.tables(conn))["queue"]
        key = self.coerce_id(q.c("id"), job_id)
        row = (await conn.execute(sa.select(q.table).where(q.c("id") == key))).first()
        if row is None:
            raise NotFound(f"no job {job_id} in queue {self.queue!r} ({q.name}.id)")
        data = row_dict(row)
        status = str(data[q.c("status").name])
        sections: list[Section] = []
        issue = data.get(q.c("issue_number").name)
        if issue is not None:
            siblings = (
                sa.select(q.c("id"), q.c("status"), q.c("job_type"), q.c("queued_at"))
                .where(q.c("issue_number") == issue, q.c("id") != key)
                .order_by(q.c("queued_at"))
                .limit(20)
            )
            rows = [row_dict(r) for r in (await conn.execute(siblings)).all()]
            if rows:
                sections.append(Section(f"other rows for issue #{issue}", rows))
        return JobDetail(
            queue=self.queue,
            job_id=str(plain(row._mapping[q.c("id").name])),
            status=status,
            canonical=self.canonical(status),
            row=data,
            sections=sections,
            events=[],
            events_note=f"{q.name} keeps no job events; queuebot's own audit trail records "
            "every change it makes",
        )

    def dead_where(
        self, tables: dict[str, BoundTable], filters: DeadFilter
    ) -> list[sa.ColumnElement[bool]]:
        """The dead letters ``filters`` picks: /queue dlq lists them and a staged redrive
        selects them with this one definition, so the two cannot disagree."""
        q = tables["queue"]
        if filters.tenant is not None:
            raise UsageError(
                f"queue {self.queue!r} (worker_queue) has no tenants; select by failure "
                "reason, job type or --error-like instead"
            )
        where: list[sa.ColumnElement[bool]] = [q.c("status").in_(self.dead_letter_statuses)]
        if filters.reason is not None:
            if filters.reason not in FAILURE_REASONS:
                raise UsageError(
                    f"unknown failure reason {filters.reason!r}; expected one of "
                    f"{', '.join(FAILURE_REASONS)}"
                )
            where.append(q.c("failure_reason") == filters.reason)
        if filters.job_type is not None:
            where.append(q.c("job_type") == filters.job_type)
        if filters.error_like is not None:
            where.append(q.c("error_message").icontains(filters.error_like, autoescape=True))
        return where

    def dead_order(self, tables: dict[str, BoundTable]) -> list[sa.ColumnElement[Any]]:
        """Newest dead letters first."""
        q = tables["queue"]
        return [q.c("queued_at").desc(), q.c("id").desc()]

    async def dead(self, conn: AsyncConnection, *, filters: DeadFilter) -> JobList:
        tables = await self.tables(conn)
        q = tables["queue"]
        where = self.dead_where(tables, filters)
        total = (await conn.execute(sa.select(sa.func.count()).where(*where))).scalar_one()
        listing = (
            sa.select(q.table).where(*where).order_by(*self.dead_order(tables)).limit(filters.limit)
        )
        rows = [self._summary(q, r) for r in (await conn.execute(listing)).all()]
        return JobList(total=int(total), rows=rows)

    def _summary(self, q: BoundTable, row: sa.Row[Any], note: str | None = None) -> JobSummary:
        m = row._mapping
        status = str(plain(m[q.c("status").name]))
        reason = m[q.c("failure_reason").name]
        return JobSummary(
            id=str(plain(m[q.c("id").name])),
            status=status,
            canonical=self.canonical(status),
            reason=str(plain(reason)) if reason is not None else None,
            error=m[q.c("error_message").name],
            group=m[q.c("job_type").name],
            attempts=m[q.c("retry_count").name],
            at=as_utc(m[q.c("queued_at").name]),
            note=note,
        )

    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList:
        q = (await self.tables(conn))["queue"]
        cond = self._stuck_condition(q, self.stuck_cutoff(now))
        total = (await conn.execute(sa.select(sa.func.count()).where(cond))).scalar_one()
        listing = sa.select(q.table).where(cond).order_by(q.c("claimed_at")).limit(limit)
        rows = []
        for r in (await conn.execute(listing)).all():
            m = r._mapping
            if m[q.c("status").name] == "claimed":
                since = as_utc(m[q.c("claimed_at").name])
                note = "claimed, never started, no heartbeat"
            else:
                since = as_utc(m[q.c("heartbeat_at").name] or m[q.c("started_at").name])
                note = "running, heartbeat stale"
            age = f" for {_minutes(now, since)}" if since else ""
            summary = self._summary(q, r, note=f"{note}{age} on {m[q.c('server_node').name]}")
            rows.append(summary)
        return JobList(total=int(total), rows=rows)

    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]:
        q = (await self.tables(conn))["queue"]
        queued = (
            sa.select(q.c("issue_number"), q.c("id"), q.c("status"))
            .where(
                q.c("issue_number").in_(
                    sa.select(q.c("issue_number"))
                    .where(q.c("status") == "queued")
                    .group_by(q.c("issue_number"))
                    .having(sa.func.count() > 1)
                    .limit(limit)
                ),
                q.c("status") == "queued",
            )
            .order_by(q.c("issue_number"), q.c("queued_at"))
        )
        groups: dict[str, list[str]] = defaultdict(list)
        for issue, job_id, _status in (await conn.execute(queued)).all():
            groups[str(issue)].append(str(plain(job_id)))
        return [
            DuplicateGroup(f"issue #{k}", ids, f"{len(ids)} queued rows")
            for k, ids in groups.items()
        ]


def _minutes(now: datetime, since: datetime) -> str:
    minutes = int((now - since).total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
