"""The ``worker_queue`` profile: one table like ``dev_r_worker_queue``, where a row is a
job and its status says where it is (queued, claimed, running, done, failed,
failed_permanently, cancelled). This module reads it; ``changes`` and ``plans`` write it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import ProfileName, QueueConfig
from services.errors import NotFound, UsageError
from services.estate import args_like
from services.estate.demo_kit import ProfileDemo
from services.estate.model import (
    NO_REASON,
    CanonicalState,
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobList,
    JobSummary,
    Section,
)
from services.estate.ops import Action
from services.estate.profile import QueueProfile, as_utc, plain, row_dict
from services.estate.tables import BoundTable, IndexPlan, TableSpec
from services.estate.worker_queue import words
from services.estate.worker_queue.changes import WorkerQueueChanges
from services.estate.worker_queue.housekeeping import WorkerQueueHousekeeping
from services.estate.worker_queue.plans import WorkerQueuePlanOps
from services.estate.worker_queue.schema import (
    CANCELLED,
    CLAIMED,
    FAILURE_REASONS,
    QUEUED,
)
from services.estate.worker_queue.triage import WorkerQueueTriage

NOT_READ = "nothing: queuebot does not read it"


class WorkerQueueProfile(QueueProfile):
    name: ClassVar[ProfileName] = "worker_queue"  # one of the names the configuration accepts
    failure_reasons = FAILURE_REASONS
    specs = (
        TableSpec(
            "queue",
            "dev_r_worker_queue",
            # what triage, requeue, cancel, redrive and the plan ops cannot work without
            required=("id", "status", "error_message", "queued_at", "claimed_at"),
            optional={
                "issue_number": "no duplicate detection (triage, cancel --duplicates) and "
                "no other rows of the issue in /queue show",
                "github_issue_number": NOT_READ,
                "job_type": "no by-type breakdown in triage; triage --type and --job-type are "
                "usage errors",
                "failure_reason": "no failure_reason breakdown in triage or /queue dlq; "
                "--failure-reason is a usage error",
                "retry_count": "a requeue or redrive does not reset the retry count; /queue "
                "dlq shows no retries",
                "max_retries": NOT_READ,
                "next_attempt_at": "a requeue or redrive does not clear next_attempt_at",
                "server_node": "no node in the stuck report; a requeue does not clear it",
                "server_preference": NOT_READ,
                "started_at": "stuck is judged without it (by heartbeat_at, else "
                "claimed_at); a requeue does not clear it",
                "heartbeat_at": "stuck is judged by started_at, else claimed_at",
                "analyst_notes": NOT_READ,
                "payload": args_like.ABSENT,
            },
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
    attempts_label = "retries"  # retry_count: the retries after the first attempt
    status_writes = {
        Action.REQUEUE: ((CanonicalState.PENDING, QUEUED),),
        Action.REDRIVE: ((CanonicalState.PENDING, QUEUED),),
        Action.CANCEL: ((CanonicalState.CANCELLED, CANCELLED),),
    }

    write_needs = {
        "requeue": (("queue", "UPDATE", "status"),),
        "redrive": (("queue", "UPDATE", "status"),),
        "cancel": (("queue", "UPDATE", "status"),),
    }

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self.triage_reads = WorkerQueueTriage(self)
        self.changes = WorkerQueueChanges(self)
        self.plan_ops = WorkerQueuePlanOps(self)
        self.housekeeping_parts = WorkerQueueHousekeeping(self)

    def demo(self) -> ProfileDemo:
        from services.estate.worker_queue.demo import (
            WorkerQueueDemo,  # only ``queuebot demo`` needs it
        )

        return WorkerQueueDemo(self)

    def index_plan(self) -> list[IndexPlan]:
        return [
            (
                "queue",
                "status_reason_type",
                ("status", "failure_reason", "job_type"),
                None,
                "triage breakdowns as an index-only scan; /queue dlq --failure-reason",
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
                ("status", tuple(self.statuses_in(CanonicalState.IN_FLIGHT))),
                "stuck rows (claimed or running with no sign of life)",
            ),
        ]

    # -- what the team's table has --------------------------------------------------------

    async def failure_reason_counts(self, conn: AsyncConnection) -> dict[str, int] | None:
        """Failed rows (not failed_permanently, which is dead) per failure_reason: one
        GROUP BY over the (status, failure_reason, job_type) index."""
        q = (await self.tables(conn))["queue"]
        if not q.has("failure_reason"):
            return None
        reason = q.c("failure_reason")
        failed = q.c("status").in_(self.statuses_in(CanonicalState.FAILED))
        rows = (
            await conn.execute(sa.select(reason, sa.func.count()).where(failed).group_by(reason))
        ).all()
        counts: dict[str, int] = defaultdict(int)
        for value, n in rows:
            counts[str(plain(value)) if value is not None else NO_REASON] += int(n)
        return dict(counts)

    async def show(self, conn: AsyncConnection, *, job_id: str) -> JobDetail:
        q = (await self.tables(conn))["queue"]
        key = self.coerce_id(q.c("id"), job_id)
        row = (await conn.execute(sa.select(q.table).where(q.c("id") == key))).first()
        if row is None:
            raise NotFound(f"no job {job_id} in queue {self.queue!r} ({q.name}.id)")
        data = row_dict(row)
        status = str(data[q.c("status").name])
        sections: list[Section] = []
        issue = data.get(q.c("issue_number").name) if q.has("issue_number") else None
        if issue is not None:
            columns = [q.c(c) for c in ("id", "status", "job_type", "queued_at") if q.has(c)]
            siblings = (
                sa.select(*columns)
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
                f"queue {self.queue!r} (worker_queue) has no tenants; select by "
                f"{words.ways_out(q)} instead"
            )
        where: list[sa.ColumnElement[bool]] = [q.c("status").in_(self.dead_letter_statuses)]
        if filters.reason is not None:
            if not q.has("failure_reason"):
                raise words.no_filter(self.queue, q, "failure_reason")
            if filters.reason not in FAILURE_REASONS:
                raise UsageError(
                    f"unknown failure reason {filters.reason!r}; expected one of "
                    f"{', '.join(FAILURE_REASONS)}"
                )
            where.append(q.c("failure_reason") == filters.reason)
        if filters.job_type is not None:
            if not q.has("job_type"):
                raise words.no_filter(self.queue, q, "job_type")
            where.append(q.c("job_type") == filters.job_type)
        if filters.error_like is not None:
            where.append(q.c("error_message").icontains(filters.error_like, autoescape=True))
        if filters.job_ids is not None:
            where.append(q.isin("id", [self.coerce_id(q.c("id"), j) for j in filters.job_ids]))
        if filters.args_like is not None:  # last: a scan of the dead rows the rest leave
            where.append(self.args_where(tables, filters.args_like))
        return where

    def args_lookup(self, tables: Mapping[str, BoundTable]) -> args_like.Lookup | None:
        q = tables["queue"]
        if not q.has("payload"):
            return None
        kind = q.c("job_type") if q.has("job_type") else None
        return args_like.Lookup(
            q.table, (), q.c("id"), q.c("status"), self.canonical, kind, q.c("payload")
        )

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

        def value(column: str) -> Any:
            return m[q.c(column).name] if q.has(column) else None

        status = str(plain(m[q.c("status").name]))
        reason = value("failure_reason")
        return JobSummary(
            id=str(plain(m[q.c("id").name])),
            status=status,
            canonical=self.canonical(status),
            reason=str(plain(reason)) if reason is not None else None,
            error=m[q.c("error_message").name],
            group=value("job_type"),
            attempts=value("retry_count"),
            at=as_utc(m[q.c("queued_at").name]),
            note=note,
        )

    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList:
        tables = await self.tables(conn)
        q, cond = tables["queue"], self.triage_reads.stuck_where(tables, now)
        total = (await conn.execute(sa.select(sa.func.count()).where(*cond))).scalar_one()
        listing = sa.select(q.table).where(*cond).order_by(q.c("claimed_at")).limit(limit)
        rows = []
        for r in (await conn.execute(listing)).all():
            m = r._mapping
            signs = {
                c: as_utc(m[q.c(c).name])
                for c in ("heartbeat_at", "started_at", "claimed_at")
                if q.has(c)
            }
            if m[q.c("status").name] == CLAIMED:
                since = signs["claimed_at"]
                note = "claimed, never started" + (
                    ", no heartbeat" if q.has("heartbeat_at") else ""
                )
                age = f" for {words.minutes(now, since)}" if since else ""
            else:
                note, age = words.running_note(q, signs, now)
            node = m[q.c("server_node").name] if q.has("server_node") else None
            where = f" on {node}" if node else ""
            rows.append(self._summary(q, r, note=f"{note}{age}{where}"))
        return JobList(total=int(total), rows=rows)

    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]:
        q = (await self.tables(conn))["queue"]
        if not q.has("issue_number"):
            raise words.no_column(
                self.queue, "issue_number", "duplicate queued rows cannot be told apart"
            )
        pending = self.statuses_in(CanonicalState.PENDING)
        queued = (
            sa.select(q.c("issue_number"), q.c("id"), q.c("status"))
            .where(
                q.c("issue_number").in_(
                    sa.select(q.c("issue_number"))
                    .where(q.c("status").in_(pending))
                    .group_by(q.c("issue_number"))
                    .having(sa.func.count() > 1)
                    .limit(limit)
                ),
                q.c("status").in_(pending),
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
