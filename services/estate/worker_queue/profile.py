"""The ``worker_queue`` profile: one table like ``dev_r_worker_queue``, where a row is a
job and its status says where it is (queued, claimed, running, done, failed,
failed_permanently, cancelled). This module reads it; ``changes`` and ``plans`` write it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.errors import NotFound, UsageError
from services.estate import estimate
from services.estate.at_once import read_named
from services.estate.demo_kit import ProfileDemo
from services.estate.model import (
    NO_REASON,
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
from services.estate.ops import Action
from services.estate.profile import QueueProfile, as_utc, plain, row_dict
from services.estate.signature import SIGNATURE_SAMPLE, display_signature, top_signatures
from services.estate.tables import BoundTable, IndexPlan, TableSpec
from services.estate.worker_queue import words
from services.estate.worker_queue.changes import WorkerQueueChanges
from services.estate.worker_queue.housekeeping import WorkerQueueHousekeeping
from services.estate.worker_queue.plans import WorkerQueuePlanOps
from services.estate.worker_queue.schema import (
    ACTIVE,
    CANCELLED,
    CLAIMED,
    FAILURE_REASONS,
    QUEUED,
)

NOT_READ = "nothing: queuebot does not read it"
NO_TYPE = "(no job type)"  # triage's by-type row of rows whose job_type is NULL


class WorkerQueueProfile(QueueProfile):
    name = "worker_queue"
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
                "job_type": "no by-type breakdown in triage; --type and --job-type are "
                "usage errors",
                "failure_reason": "no failure_reason breakdown in triage or /queue dlq; "
                "--reason and --failure-reason are usage errors",
                "retry_count": "a requeue or redrive does not reset the retry count; /queue "
                "dlq shows no tries",
                "max_retries": NOT_READ,
                "next_attempt_at": "a requeue or redrive does not clear next_attempt_at",
                "server_node": "no node in the stuck report; a requeue does not clear it",
                "server_preference": NOT_READ,
                "started_at": "stuck is judged without it (by heartbeat_at, else "
                "claimed_at); a requeue does not clear it",
                "heartbeat_at": "stuck is judged by started_at, else claimed_at",
                "analyst_notes": NOT_READ,
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
                ("status", tuple(self.statuses_in(CanonicalState.IN_FLIGHT))),
                "stuck rows (claimed or running with no sign of life)",
            ),
        ]

    # -- what the team's table has --------------------------------------------------------

    def _no_column(self, column: str, what: str) -> UsageError:
        return UsageError(
            f"queue {self.queue!r} (worker_queue) has no {column} column, so {what}; "
            "see `queuebot config check` for what this queue's table turns off"
        )

    def _stuck_condition(self, q: BoundTable, cutoff: datetime) -> sa.ColumnElement[bool]:
        # Stuck: claimed but never started and no heartbeat; or running (any other
        # in-flight status) whose latest sign of life (heartbeat, start, claim) is stale.
        status = q.c("status")
        claimed: list[sa.ColumnElement[bool]] = [
            status.in_(q.takes("status", [CLAIMED])),
            q.c("claimed_at") < cutoff,
        ]
        signs = [q.c(c) for c in ("heartbeat_at", "started_at") if q.has(c)]
        claimed.extend(c.is_(None) for c in signs)
        life = sa.func.coalesce(*signs, q.c("claimed_at")) if signs else q.c("claimed_at")
        running = [s for s in self.statuses_in(CanonicalState.IN_FLIGHT) if s != CLAIMED]
        return sa.or_(sa.and_(*claimed), sa.and_(status.in_(running), life < cutoff))

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        q = (await self.tables(conn))["queue"]
        has_type, has_reason = q.has("job_type"), q.has("failure_reason")
        where: list[sa.ColumnElement[bool]] = []
        if since is not None:
            where.append(q.c("queued_at") >= since)
        if job_type is not None:
            if not has_type:
                raise self._no_column("job_type", "triage cannot select by --type")
            where.append(q.c("job_type") == job_type)
        status = q.c("status")
        # Counts alone, so an index on (status, failure_reason, job_type) answers them
        # without reading the table; the oldest pending row and the stuck count are two
        # small index lookups beside it. On a large table the succeeded rows are
        # estimated rather than counted (services/estate/estimate.py).
        (plan,) = (
            await estimate.plans(conn, [(status, self.statuses_in(CanonicalState.SUCCEEDED))])
            if not exact and since is None and job_type is None
            else [None]
        )
        groups = [q.c(c) for c in ("failure_reason", "job_type") if q.has(c)]
        if plan is not None:
            grouped = estimate.counts_except(q.table, status, [plan.status], group=groups)
        else:
            grouped = sa.select(status, *groups, sa.func.count()).where(*where)
            grouped = grouped.group_by(status, *groups)
        extras = sa.select(
            self._oldest_pending(q, where).scalar_subquery(),
            sa.select(sa.func.count())
            .where(self._stuck_condition(q, self.stuck_cutoff(now)), *where)
            .scalar_subquery(),
        )
        # The costliest read gets a connection of its own, and the small reads beside it go
        # one after another on another: the grouped count where it reads every row, the
        # duplicates (a probe per queued issue) where the succeeded rows are estimated.
        statements = {"grouped": grouped, "extras": extras, "newest": self._newest_errors(q, where)}
        if q.has("issue_number"):
            statements["dups"] = self._duplicate_counts(q, where)
        heavy = "dups" if plan is not None and "dups" in statements else "grouped"
        read = await read_named(conn, statements, heavy=(heavy,))
        rows, extra_rows, sig_rows = read["grouped"], read["extras"], read["newest"]
        dup_rows_ = [read["dups"]] if "dups" in read else []
        # (status, failure_reason or None, job_type or None, count), whichever the table has
        slots = (has_reason, has_type)
        spread = [(r[0], *_spread(r[1:-1], slots), r[-1]) for r in rows]
        oldest_raw, stuck_total = extra_rows[0]
        dup_groups, dup_rows, dup_active = (
            tuple(int(n or 0) for n in dup_rows_[0][0]) if dup_rows_ else (0, 0, 0)
        )

        counted: dict[str, int] = defaultdict(int)  # per status, then the estimate if made
        for r in spread:
            counted[str(plain(r[0]))] += r[-1]
        estimated = estimate.settle(plan, counted)
        if plan is not None and not estimated:  # statistics too stale to use: count all
            return await self.triage(conn, now=now, since=since, job_type=job_type, exact=True)
        status_counts: dict[str, int] = defaultdict(int)
        reasons: dict[str, int] = defaultdict(int)
        types: dict[str, dict[CanonicalState, int]] = defaultdict(lambda: defaultdict(int))
        for raw_status, reason, jtype, count in spread:
            name = str(plain(raw_status))
            status_counts[name] += count
            if has_reason and name in self.dead_letter_statuses:
                reasons[str(plain(reason)) if reason is not None else NO_REASON] += count
            if has_type:
                kind = str(plain(jtype)) if jtype is not None else NO_TYPE
                types[kind][self.canonical(name)] += count
        guessed = plan.status if estimated and plan is not None else None
        if guessed is not None:
            status_counts[guessed] = counted[guessed]
        oldest = as_utc(oldest_raw)
        dead_total = sum(status_counts.get(s, 0) for s in self.dead_letter_statuses)
        return Triage(
            queue=self.queue,
            profile=self.name,
            unit="jobs",
            dead_title="Dead letters",
            duplicate_label="issues queued twice",
            taken_at=now,
            since=since,
            total=sum(status_counts.values()),
            status_title="status",
            by_status=[
                StatusCount(s, self.canonical(s), n, s == guessed)
                for s, n in sorted(status_counts.items(), key=lambda kv: -kv[1])
            ],
            by_reason=[Count(k, n) for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])],
            by_signature=[
                Count(display_signature(s), n) for s, n in top_signatures(r[0] for r in sig_rows)
            ],
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
            duplicates_detected=q.has("issue_number"),
            notes=words.notes(q),
        )

    def _oldest_pending(self, q: BoundTable, where: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
        """The oldest pending row's queued_at: the top of the (status, queued_at) index."""
        pending = q.c("status").in_(self.statuses_in(CanonicalState.PENDING))
        return sa.select(sa.func.min(q.c("queued_at"))).where(pending, *where)

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        q = (await self.tables(conn))["queue"]
        return as_utc((await conn.execute(self._oldest_pending(q, []))).scalar_one())

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

    def _newest_errors(self, q: BoundTable, where: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
        """The error texts of the newest dead letters, whose signatures the reply counts:
        each dead status's newest rows come straight off the (status, queued_at) index, so
        the cost does not grow with the size of the failure pile; the reply says how many
        rows the breakdown covers."""
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
        return sa.select(pool.c.error).order_by(pool.c.at.desc()).limit(SIGNATURE_SAMPLE)

    def _duplicate_counts(
        self, q: BoundTable, where: list[sa.ColumnElement[bool]]
    ) -> sa.Select[Any]:
        """One pass over the queued rows, grouped by issue: the issues queued more than once
        (groups, surplus rows), and the queued rows whose issue already has a claimed,
        running or done row, probed once per issue through the (issue_number, status)
        index (the done rows are most of the table: not scanned)."""
        pending = self.statuses_in(CanonicalState.PENDING)
        queued = [q.c("status").in_(pending), q.c("issue_number").is_not(None), *where]
        other = q.table.alias("active")
        active_issue = sa.exists().where(
            other.c[q.c("issue_number").name] == q.c("issue_number"),
            other.c[q.c("status").name].in_(self.statuses_in(*ACTIVE)),
        )
        per_issue = (
            sa.select(
                sa.func.count().label("n"),
                sa.case((active_issue, 1), else_=0).label("active"),
            )
            .where(*queued)
            .group_by(q.c("issue_number"))
            .subquery()
        )
        twice = per_issue.c.n > 1
        return sa.select(
            sa.func.count().filter(twice),
            sa.func.coalesce(sa.func.sum(per_issue.c.n - 1).filter(twice), 0),
            sa.func.coalesce(sa.func.sum(per_issue.c.n * per_issue.c.active), 0),
        )

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
        q = (await self.tables(conn))["queue"]
        cond = self._stuck_condition(q, self.stuck_cutoff(now))
        total = (await conn.execute(sa.select(sa.func.count()).where(cond))).scalar_one()
        listing = sa.select(q.table).where(cond).order_by(q.c("claimed_at")).limit(limit)
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
            raise self._no_column("issue_number", "duplicate queued rows cannot be told apart")
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


def _spread(values: Sequence[Any], present: Sequence[bool]) -> list[Any]:
    """``values`` of the columns present, placed in ``present``'s slots, None elsewhere."""
    given = iter(values)
    return [next(given) if here else None for here in present]
