"""The worker_queue triage (``WorkerQueueTriage``, the profile's ``triage_reads``): the
queue's breakdowns in a few statements an index can answer (counts by status, failure
reason and job type; the oldest pending row; the stuck and duplicate counts; the newest
dead letters' errors), read side by side."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import estimate
from services.estate.at_once import read_named
from services.estate.model import (
    NO_REASON,
    CanonicalState,
    Count,
    StatusCount,
    Triage,
    TypeCounts,
)
from services.estate.profile import QueueProfile, as_utc, plain
from services.estate.signature import SIGNATURE_SAMPLE, display_signature, top_signatures_of
from services.estate.tables import BoundTable
from services.estate.triage import NO_TYPE
from services.estate.worker_queue import words
from services.estate.worker_queue.schema import ACTIVE, CLAIMED


class WorkerQueueTriage:
    """Triage of the one ``queue`` table."""

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

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
        q = (await profile.tables(conn))["queue"]
        has_type, has_reason = q.has("job_type"), q.has("failure_reason")
        where: list[sa.ColumnElement[bool]] = []
        if since is not None:
            where.append(q.c("queued_at") >= since)
        if job_type is not None:
            if not has_type:
                raise words.no_column(profile.queue, "job_type", "triage cannot select by --type")
            where.append(q.c("job_type") == job_type)
        status = q.c("status")
        # Counts alone, so an index on (status, failure_reason, job_type) answers them
        # without reading the table; the oldest pending row and the stuck count are two
        # small index lookups beside it. On a large table the succeeded rows are
        # estimated rather than counted (services/estate/estimate.py).
        (plan,) = (
            await estimate.plans(conn, [(status, profile.statuses_in(CanonicalState.SUCCEEDED))])
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
            .where(*self.stuck_where({"queue": q}, now), *where)
            .scalar_subquery(),
        )
        # The costliest read gets a connection of its own, and the small reads beside it go
        # one after another on another: the grouped count where it reads every row, the
        # duplicates (a probe per queued issue) where the succeeded rows are estimated.
        statements = {"grouped": grouped, "extras": extras, "newest": self._newest(q, where)}
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
            if has_reason and name in profile.dead_letter_statuses:
                reasons[str(plain(reason)) if reason is not None else NO_REASON] += count
            if has_type:
                kind = str(plain(jtype)) if jtype is not None else NO_TYPE
                types[kind][profile.canonical(name)] += count
        guessed = plan.status if estimated and plan is not None else None
        if guessed is not None:
            status_counts[guessed] = counted[guessed]
        oldest = as_utc(oldest_raw)
        dead_total = sum(status_counts.get(s, 0) for s in profile.dead_letter_statuses)
        found = top_signatures_of(r[0] for r in sig_rows)
        return Triage(
            queue=profile.queue,
            profile=profile.name,
            unit="jobs",
            dead_title="Dead letters",
            duplicate_label="issues queued twice",
            taken_at=now,
            since=since,
            total=sum(status_counts.values()),
            status_title="status",
            by_status=[
                StatusCount(s, profile.canonical(s), n, s == guessed)
                for s, n in sorted(status_counts.items(), key=lambda kv: -kv[1])
            ],
            by_reason=[Count(k, n) for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])],
            by_signature=[Count(display_signature(s), n) for s, n in found.rows],
            signatures_of=found.counted,  # the newest SIGNATURE_SAMPLE dead letters, or all
            signatures_total=dead_total,
            signature_groups=found.groups,
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

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        q = (await self.profile.tables(conn))["queue"]
        return as_utc((await conn.execute(self._oldest_pending(q, []))).scalar_one())

    def stuck_where(
        self, tables: Mapping[str, BoundTable], now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        """Claimed but never started and no heartbeat; or running (any other in-flight
        status) whose latest sign of life (heartbeat, start, claim) is stale."""
        q, cutoff = tables["queue"], self.profile.stuck_cutoff(now)
        status = q.c("status")
        claimed: list[sa.ColumnElement[bool]] = [
            status.in_(q.takes("status", [CLAIMED])),
            q.c("claimed_at") < cutoff,
        ]
        signs = [q.c(c) for c in ("heartbeat_at", "started_at") if q.has(c)]
        claimed.extend(c.is_(None) for c in signs)
        life = sa.func.coalesce(*signs, q.c("claimed_at")) if signs else q.c("claimed_at")
        running = [s for s in self.profile.statuses_in(CanonicalState.IN_FLIGHT) if s != CLAIMED]
        return [sa.or_(sa.and_(*claimed), sa.and_(status.in_(running), life < cutoff))]

    def _oldest_pending(self, q: BoundTable, where: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
        """The oldest pending row's queued_at: the top of the (status, queued_at) index."""
        pending = q.c("status").in_(self.profile.statuses_in(CanonicalState.PENDING))
        return sa.select(sa.func.min(q.c("queued_at"))).where(pending, *where)

    def _newest(self, q: BoundTable, where: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
        """The error texts of the newest dead letters, whose signatures the reply counts:
        each dead status's newest rows come straight off the (status, queued_at) index, so
        the cost does not grow with the size of the failure pile; the reply says how many
        rows the breakdown covers."""
        status, queued_at = q.c("status"), q.c("queued_at")
        parts = []
        for dead in self.profile.dead_letter_statuses:
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
        profile = self.profile
        pending = profile.statuses_in(CanonicalState.PENDING)
        queued = [q.c("status").in_(pending), q.c("issue_number").is_not(None), *where]
        other = q.table.alias("active")
        active_issue = sa.exists().where(
            other.c[q.c("issue_number").name] == q.c("issue_number"),
            other.c[q.c("status").name].in_(profile.statuses_in(*ACTIVE)),
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


def _spread(values: Sequence[Any], present: Sequence[bool]) -> list[Any]:
    """``values`` of the columns present, placed in ``present``'s slots, None elsewhere."""
    given = iter(values)
    return [next(given) if here else None for here in present]
