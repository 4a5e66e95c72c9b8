"""The ``message_job`` profile: ``queue_messages`` joined to ``clip_jobs``, with
``job_events`` and the jobs' ``video_assets``.

The message carries the delivery state (PENDING, PROCESSING, COMPLETED, DLQ); the job
carries the business state. A command's ID is the job; a message id resolves to its job.
"""

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
from services.estate.message_job.changes import MessageJobChanges
from services.estate.message_job.housekeeping import MessageJobReport
from services.estate.message_job.job_states import JobStates
from services.estate.message_job.plans import MessageJobPlanOps
from services.estate.message_job.schema import (
    CANCELLED,
    JOB_STATES,
    MESSAGE_STATES,
    PENDING,
    QUEUED,
    UNFINISHED,
)
from services.estate.message_job.triage import MessageJobTriage
from services.estate.model import (
    CanonicalState,
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobEvent,
    JobList,
    JobSummary,
    Section,
)
from services.estate.ops import Action
from services.estate.profile import QueueProfile, as_utc, plain, row_dict
from services.estate.tables import BoundTable, IndexPlan, TableSpec

NOT_READ = "nothing: queuebot does not read it"
NO_SOURCES = (
    "the source-object check before a redrive is n/a (it cannot tell a job whose source "
    "object is gone), and /queue show has no source asset"
)


class MessageJobProfile(QueueProfile):
    name: ClassVar[ProfileName] = "message_job"  # one of the names the configuration accepts
    specs = (
        TableSpec(
            "messages",
            "queue_messages",
            required=("id", "job_id", "status", "available_at", "claimed_at", "last_error"),
            optional={
                "attempt_count": "a redrive does not reset the message's attempts; /queue dlq "
                "and the stuck report show no tries",
            },
        ),
        TableSpec(
            "jobs",
            "clip_jobs",
            required=("id", "status"),
            optional={
                "asset_id": NO_SOURCES,
                "tenant_id": "no by-tenant breakdown in triage and no tenant in listings; "
                "--tenant is a usage error",
                "attempt_count": "a redrive does not reset the job's attempts",
                "progress_percent": "a redrive does not reset progress; the stuck report "
                "shows none",
                "error_message": "a redrive does not clear the job's error",
                "started_at": NOT_READ,
                "finished_at": "a redrive does not clear finished_at",
                "payload": args_like.ABSENT,
            },
        ),
        TableSpec(
            "events",
            "job_events",
            required=("id", "aggregate_id", "event_type", "created_at"),
            optional={"message": "the job events queuebot writes carry no note"},
            absent="no job events: /queue show lists none, a change writes none, and "
            "earlier redrives are counted in queuebot's own redrive log",
        ),
        TableSpec(
            "assets",
            "video_assets",
            required=("id",),
            optional={
                "source_object_key": NO_SOURCES,
                "status": "a source object marked DELETED is not recognised: only a missing "
                "asset row or an empty key keeps a job from a redrive",
            },
            absent=NO_SOURCES,
        ),
    )
    states = MESSAGE_STATES
    status_writes = {
        Action.REDRIVE: (
            (CanonicalState.PENDING, PENDING),
            (CanonicalState.PENDING, QUEUED),
        ),
        Action.CANCEL: ((CanonicalState.CANCELLED, CANCELLED),),
    }

    write_needs = {
        "redrive": (
            ("messages", "UPDATE", "status"),
            ("jobs", "UPDATE", "status"),
            ("events", "INSERT", None),
        ),
        "cancel": (("jobs", "UPDATE", "status"), ("events", "INSERT", None)),
    }

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self.jobs = JobStates(self)
        self.triage_reads = MessageJobTriage(self)
        self.changes = MessageJobChanges(self)
        self.plan_ops = MessageJobPlanOps(self)
        self.housekeeping_report = MessageJobReport()

    @classmethod
    def status_vocabularies(cls) -> list[tuple[str, str, Mapping[str, CanonicalState]]]:
        return [("messages", "status", MESSAGE_STATES), ("jobs", "status", JOB_STATES)]

    def demo(self) -> ProfileDemo:
        from services.estate.message_job.demo import (
            MessageJobDemo,  # only ``queuebot demo`` needs it
        )

        return MessageJobDemo(self)

    def index_plan(self) -> list[IndexPlan]:
        return [
            (
                "messages",
                "status_available",
                ("status", "available_at"),
                None,
                "triage counts as an index-only scan; oldest pending message; --since",
            ),
            (
                "messages",
                "job_id",
                ("job_id",),
                None,
                "a job's messages (/queue show), duplicate messages, the DLQ join",
            ),
            (
                "messages",
                "claimed",
                ("status", "claimed_at"),
                (
                    "status",
                    tuple(self.statuses_in(CanonicalState.IN_FLIGHT, CanonicalState.DEAD)),
                ),
                "stuck messages; /queue dlq newest first",
            ),
            (
                "messages",
                "dead_job",
                ("status", "job_id"),
                ("status", tuple(self.dead_letter_statuses)),
                "triage's dead letters by job status, as an index-only scan",
            ),
            (
                "jobs",
                "status_id",
                ("status", "id"),
                None,
                "job status counts and the failed jobs' ids as index-only scans (it replaces "
                f"qb_{self.queue}_status on (status) alone, which earlier versions printed: "
                "drop that one once this one is built)",
            ),
            (
                "events",
                "aggregate",
                ("aggregate_id", "created_at"),
                None,
                "a job's events (/queue show); counting earlier REDRIVE_REQUESTED events",
            ),
        ]

    async def _resolve_job(
        self, conn: AsyncConnection, t: dict[str, BoundTable], raw: str
    ) -> sa.Row[Any]:
        m, j = t["messages"], t["jobs"]
        job_key = self.coerce_id(j.c("id"), raw)
        job = (await conn.execute(sa.select(j.table).where(j.c("id") == job_key))).first()
        if job is not None:
            return job
        msg_key = self.coerce_id(m.c("id"), raw)
        via = sa.select(m.c("job_id")).where(m.c("id") == msg_key).scalar_subquery()
        job = (await conn.execute(sa.select(j.table).where(j.c("id") == via))).first()
        if job is None:
            raise NotFound(
                f"no job {raw} in queue {self.queue!r} (looked in {j.name}.id and {m.name}.id)"
            )
        return job

    async def show(self, conn: AsyncConnection, *, job_id: str) -> JobDetail:
        t = await self.tables(conn)
        m, j = t["messages"], t["jobs"]
        job = await self._resolve_job(conn, t, job_id)
        key = job._mapping[j.c("id").name]
        messages = (
            await conn.execute(
                sa.select(m.table).where(m.c("job_id") == key).order_by(m.c("available_at").desc())
            )
        ).all()
        asset = None
        a = t.get("assets")
        if a is not None and j.has("asset_id"):
            asset = (
                await conn.execute(
                    sa.select(a.table).where(a.c("id") == job._mapping[j.c("asset_id").name])
                )
            ).first()
        e = t.get("events")
        events: list[JobEvent] = []
        if e is not None:
            note = e.c("message") if e.has("message") else sa.null()
            found = await conn.execute(
                sa.select(e.c("event_type"), note, e.c("created_at"))
                .where(e.c("aggregate_id") == key)
                .order_by(e.c("created_at"), e.c("id"))
                .limit(200)
            )
            events = [JobEvent(str(r[0]), r[1], as_utc(r[2])) for r in found.all()]
        job_status = str(job._mapping[j.c("status").name])
        message_status = str(messages[0]._mapping[m.c("status").name]) if messages else None
        sections = [
            Section(
                f"queue message{'s' if len(messages) != 1 else ''} ({m.name})",
                [row_dict(r) for r in messages],
            )
        ]
        if asset is not None and a is not None:
            sections.append(Section(f"source asset ({a.name})", [row_dict(asset)]))
        status = f"{job_status} / {message_status}" if message_status else job_status
        canonical = (
            self.canonical(message_status) if message_status else self.jobs.canonical(job_status)
        )
        return JobDetail(
            queue=self.queue,
            job_id=str(plain(key)),
            status=status,
            canonical=canonical,
            row=row_dict(job),
            sections=sections,
            events=events,
            events_note=None
            if e is not None
            else f"queue {self.queue!r} keeps no job events table; queuebot's own audit "
            "trail records every change it makes",
        )

    def dead_where(
        self, tables: dict[str, BoundTable], filters: DeadFilter
    ) -> list[sa.ColumnElement[bool]]:
        """The dead letters ``filters`` picks (over messages joined to their jobs): /queue
        dlq lists them and a staged redrive selects them with this one definition."""
        m, j = tables["messages"], tables["jobs"]
        if filters.reason is not None or filters.job_type is not None:
            tenant = " or --tenant T" if j.has("tenant_id") else ""  # only what works here
            raise UsageError(
                f"queue {self.queue!r} (message_job) has no failure_reason or job type "
                f"columns; filter with --error-like TEXT{tenant}"
            )
        where: list[sa.ColumnElement[bool]] = [m.c("status").in_(self.dead_letter_statuses)]
        if filters.tenant is not None:
            if not j.has("tenant_id"):
                raise UsageError(
                    f"queue {self.queue!r} (message_job) has no tenant_id column, so dead "
                    "letters cannot be selected by tenant; filter with --error-like TEXT"
                )
            where.append(j.c("tenant_id") == filters.tenant)
        if filters.error_like is not None:
            where.append(m.c("last_error").icontains(filters.error_like, autoescape=True))
        if filters.job_ids is not None:
            where.append(
                m.isin("job_id", [self.coerce_id(m.c("job_id"), j) for j in filters.job_ids])
            )
        if filters.args_like is not None:  # last: a scan of the dead letters the rest leave
            where.append(self.args_where(tables, filters.args_like))
        return where

    def args_lookup(self, tables: Mapping[str, BoundTable]) -> args_like.Lookup | None:
        """A job's arguments are its clip job's payload (a message carries only its id)."""
        j = tables["jobs"]
        if not j.has("payload"):
            return None
        status, canonical = j.c("status"), self.jobs.canonical
        return args_like.Lookup(j.table, (), j.c("id"), status, canonical, None, j.c("payload"))

    def dead_order(self, tables: dict[str, BoundTable]) -> list[sa.ColumnElement[Any]]:
        """Newest dead letters first (never-claimed ones last)."""
        m = tables["messages"]
        return [m.c("claimed_at").desc().nulls_last(), m.c("available_at").desc()]

    @staticmethod
    def _or_null(t: BoundTable, column: str, label: str) -> sa.ColumnElement[Any]:
        return (t.c(column) if t.has(column) else sa.null()).label(label)

    async def dead(self, conn: AsyncConnection, *, filters: DeadFilter) -> JobList:
        t = await self.tables(conn)
        m, j = t["messages"], t["jobs"]
        where = self.dead_where(t, filters)
        joined = m.table.join(j.table, j.c("id") == m.c("job_id"))
        total = (
            await conn.execute(sa.select(sa.func.count()).select_from(joined).where(*where))
        ).scalar_one()
        listing = (
            sa.select(
                m.c("id").label("mid"),
                m.c("job_id").label("job_id"),
                m.c("status").label("msg_status"),
                self._or_null(m, "attempt_count", "attempt_count"),
                m.c("claimed_at").label("claimed_at"),
                m.c("available_at").label("available_at"),
                m.c("last_error").label("last_error"),
                self._or_null(j, "tenant_id", "tenant_id"),
                j.c("status").label("job_status"),
            )
            .select_from(joined)
            .where(*where)
            .order_by(*self.dead_order(t))
            .limit(filters.limit)
        )
        rows = [
            JobSummary(
                id=str(plain(r.job_id)),
                message_id=str(plain(r.mid)),
                status=f"{r.job_status} / {r.msg_status}",
                canonical=self.canonical(str(r.msg_status)),
                reason=None,
                error=r.last_error,
                group=str(r.tenant_id) if r.tenant_id is not None else None,
                attempts=r.attempt_count,
                at=as_utc(r.claimed_at or r.available_at),
            )
            for r in (await conn.execute(listing)).all()
        ]
        return JobList(total=int(total), rows=rows)

    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList:
        t = await self.tables(conn)
        m, j = t["messages"], t["jobs"]
        cond = self.triage_reads.stuck_where(t, now)
        total = (await conn.execute(sa.select(sa.func.count()).where(*cond))).scalar_one()
        listing = (
            sa.select(
                m.c("id").label("mid"),
                m.c("job_id").label("job_id"),
                m.c("status").label("msg_status"),
                self._or_null(m, "attempt_count", "attempt_count"),
                m.c("claimed_at").label("claimed_at"),
                self._or_null(j, "tenant_id", "tenant_id"),
                j.c("status").label("job_status"),
                self._or_null(j, "progress_percent", "progress_percent"),
            )
            .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
            .where(*cond)
            .order_by(m.c("claimed_at"))
            .limit(limit)
        )
        rows = []
        for r in (await conn.execute(listing)).all():
            claimed = as_utc(r.claimed_at)
            minutes = int((now - claimed).total_seconds() // 60) if claimed else 0
            progress = f" at {r.progress_percent}%" if r.progress_percent is not None else ""
            rows.append(
                JobSummary(
                    id=str(plain(r.job_id)),
                    message_id=str(plain(r.mid)),
                    status=f"{r.job_status} / {r.msg_status}",
                    canonical=CanonicalState.IN_FLIGHT,
                    reason=None,
                    error=None,
                    group=str(r.tenant_id) if r.tenant_id is not None else None,
                    attempts=r.attempt_count,
                    at=claimed,
                    note=f"processing for {minutes}m{progress}",
                )
            )
        return JobList(total=int(total), rows=rows)

    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]:
        m = (await self.tables(conn))["messages"]
        unfinished = m.c("status").in_(self.statuses_in(*UNFINISHED))
        dup_jobs = (
            sa.select(m.c("job_id"))
            .where(unfinished)
            .group_by(m.c("job_id"))
            .having(sa.func.count() > 1)
            .limit(limit)
        )
        listing = (
            sa.select(m.c("job_id"), m.c("id"))
            .where(m.c("job_id").in_(dup_jobs), unfinished)
            .order_by(m.c("job_id"), m.c("available_at"))
        )
        groups: dict[str, list[str]] = defaultdict(list)
        for job_id, msg_id in (await conn.execute(listing)).all():
            groups[str(plain(job_id))].append(str(plain(msg_id)))
        return [
            DuplicateGroup(f"job {k}", ids, f"{len(ids)} unfinished messages")
            for k, ids in groups.items()
        ]
