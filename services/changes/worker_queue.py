"""Guarded changes on a worker_queue table (seed 002 §9, §10, §12, §13)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import (
    Applied,
    ChangeKind,
    Frozen,
    Ineligible,
    Selector,
    Target,
    chunk_for,
    chunks,
)
from services.changes.plan_ops import ItemRef, WaveStatus, restored
from services.errors import UsageError
from services.estate.profile import BoundTable, plain
from services.estate.signature import display_signature, error_signature
from services.estate.worker_queue import ACTIVE, FAILURE_REASONS, WorkerQueueProfile

RESET_STATES = ("failed", "failed_permanently")  # seed 002 §12
CANCEL_STATES = ("queued", "failed")
WHY_NOT = {
    "cancelled": "cancelled on purpose",
    "done": "already done",
    "queued": "already queued",
    "claimed": "claimed by a worker right now",
    "running": "running right now",
    "failed_permanently": "failed_permanently is the record of a job that died after full "
    "retry; seed 002 says never cancel it",
}


class WorkerQueueChanges:
    def __init__(self, profile: WorkerQueueProfile) -> None:
        self.profile = profile

    async def _table(self, conn: AsyncConnection) -> BoundTable:
        return (await self.profile.tables(conn))["queue"]

    async def freeze(
        self, conn: AsyncConnection, *, kind: ChangeKind, selector: Selector
    ) -> Frozen:
        q = await self._table(conn)
        if selector.duplicates:
            return await self._duplicates(conn, q)
        if selector.failure_reason is not None:
            if selector.failure_reason not in FAILURE_REASONS:
                raise UsageError(
                    f"unknown failure reason {selector.failure_reason!r}; "
                    f"expected one of {', '.join(FAILURE_REASONS)}"
                )
            rows = (
                await conn.execute(
                    sa.select(q.table)
                    .where(
                        q.c("status") == "failed",
                        q.c("failure_reason") == selector.failure_reason,
                    )
                    .order_by(q.c("id"))
                )
            ).all()
            return Frozen([self._target(q, r) for r in rows], [])
        keys = {raw: self.profile.coerce_id(q.c("id"), raw) for raw in selector.ids}
        found: dict[Any, sa.Row[Any]] = {}
        for part in chunks(list(keys.values()), chunk_for(q.dialect)):
            for r in (await conn.execute(sa.select(q.table).where(q.isin("id", part)))).all():
                found[r._mapping[q.c("id").name]] = r
        allowed = CANCEL_STATES if kind is ChangeKind.CANCEL else RESET_STATES
        targets: list[Target] = []
        ineligible: list[Ineligible] = []
        for raw, key in keys.items():
            row = found.get(key)
            if row is None:
                ineligible.append(Ineligible(raw, "not found"))
                continue
            status = str(plain(row._mapping[q.c("status").name]))
            if status in allowed:
                targets.append(self._target(q, row))
            else:
                why = WHY_NOT.get(status, f"is {status}")
                ineligible.append(Ineligible(raw, f"{status}: {why}"))
        return Frozen(targets, ineligible)

    async def _duplicates(self, conn: AsyncConnection, q: BoundTable) -> Frozen:
        """Seed 002 §13 (all but the latest queued row per issue) and Part A (queued rows
        whose issue already has a claimed, running or done row)."""
        issue, status = q.c("issue_number"), q.c("status")
        queued = (
            await conn.execute(
                sa.select(q.table)
                .where(status == "queued", issue.is_not(None))
                .order_by(issue, q.c("queued_at").desc(), q.c("id").desc())
            )
        ).all()
        queued_issues = sa.select(issue).where(status == "queued")
        busy = set(
            (
                await conn.execute(
                    sa.select(issue).where(status.in_(ACTIVE), issue.in_(queued_issues)).distinct()
                )
            )
            .scalars()
            .all()
        )
        by_issue: dict[Any, list[sa.Row[Any]]] = defaultdict(list)
        for r in queued:
            by_issue[r._mapping[issue.name]].append(r)
        targets: list[Target] = []
        for number, rows in by_issue.items():
            surplus = rows if number in busy else rows[1:]  # keep the most recently queued
            targets.extend(self._target(q, r) for r in surplus)
        return Frozen(targets, [])

    def _target(self, q: BoundTable, row: sa.Row[Any]) -> Target:
        m = row._mapping
        status = str(plain(m[q.c("status").name]))
        reason = m[q.c("failure_reason").name]
        label = str(plain(reason)) if reason is not None else "(no failure_reason)"
        sig = display_signature(error_signature(m[q.c("error_message").name]))
        key = plain(m[q.c("id").name])
        return Target(
            id=str(key),
            key={"id": key},
            state=status,
            signature=f"{label}: {sig}" if status != "queued" else "duplicate queued",
            row=dict(row._mapping),
        )

    async def apply(
        self,
        conn: AsyncConnection,
        *,
        kind: ChangeKind,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        q = await self._table(conn)
        if kind is ChangeKind.CANCEL:
            values: dict[str, Any] = {q.c("status").name: "cancelled"}
        else:  # requeue and redrive: seed 002 §10 / §12
            values = {
                q.c(c).name: None
                for c in (
                    "failure_reason",
                    "error_message",
                    "next_attempt_at",
                    "server_node",
                    "claimed_at",
                    "started_at",
                )
            }
            values.update({q.c("status").name: "queued", q.c("retry_count").name: 0})
        by_state: dict[str, list[Target]] = defaultdict(list)
        for t in targets:
            by_state[t.state].append(t)
        changed: list[str] = []
        before: list[dict[str, Any]] = []
        for state, group in by_state.items():
            extra: dict[str, Any] = {}
            if kind is ChangeKind.CANCEL and state == "queued":  # seed 002 §13
                extra = {
                    q.c("failure_reason").name: "other",
                    q.c("error_message").name: "manually cancelled: duplicate queued row"
                    if duplicates
                    else f"manually cancelled: {note}"[:500],
                }
            ids = [self.profile.coerce_id(q.c("id"), t.id) for t in group]
            for part in chunks(ids, chunk_for(q.dialect)):
                guard = sa.and_(q.isin("id", part), q.c("status") == state)
                rows = await conn.execute(sa.select(q.table).where(guard).with_for_update())
                before.extend(dict(r._mapping) for r in rows.all())
                done = await conn.execute(
                    q.table.update().where(guard).values(**values, **extra).returning(q.c("id"))
                )
                changed.extend(str(plain(r[0])) for r in done.all())
        moved = set(changed)
        skipped = [
            Ineligible(t.id, f"moved on since the request (was {t.state})")
            for t in targets
            if t.id not in moved
        ]
        return Applied(changed=changed, skipped=skipped, before=before)


RESTORED = (
    "status",
    "retry_count",
    "failure_reason",
    "error_message",
    "next_attempt_at",
    "server_node",
    "claimed_at",
    "started_at",
)
TERMINAL = ("done", "failed", "failed_permanently", "cancelled")


class WorkerQueuePlanOps:
    """Staged redrives over failed / failed_permanently rows (seed 002 §12)."""

    has_sources = False

    def __init__(self, profile: WorkerQueueProfile) -> None:
        self.profile = profile

    async def _table(self, conn: AsyncConnection) -> BoundTable:
        return (await self.profile.tables(conn))["queue"]

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        t = await self.profile.tables(conn)
        rows = await conn.execute(
            sa.select(t["queue"].c("id"))
            .where(*self.profile.dead_where(t, selector.dead_filter()))
            .order_by(*self.profile.dead_order(t))
        )
        return [str(plain(r[0])) for r in rows.all()]

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        return {}  # a worker_queue job names an issue, not a stored object

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        from services.models import RedriveLog

        log = cast(sa.Table, RedriveLog.__table__)
        counts: dict[str, int] = {}
        ids = [t.id for t in targets]
        for part in chunks(ids, chunk_for(conn.dialect.name)):
            rows = await conn.execute(
                sa.select(log.c.job_id, sa.func.count())
                .where(log.c.queue == self.profile.queue, log.c.job_id.in_(part))
                .group_by(log.c.job_id)
            )
            counts.update({str(j): int(n) for j, n in rows.all()})
        return counts

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        q = await self._table(conn)
        ids = [self.profile.coerce_id(q.c("id"), i.job_id) for i in items]
        cols = [q.c("id"), *(q.c(c) for c in RESTORED)]
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(ids, chunk_for(q.dialect)):
            for r in (await conn.execute(sa.select(*cols).where(q.isin("id", part)))).all():
                out[str(plain(r[0]))] = dict(zip(RESTORED, (plain(v) for v in r[1:]), strict=True))
        return out

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus:
        q = await self._table(conn)
        ids = [self.profile.coerce_id(q.c("id"), i.job_id) for i in items]
        terminal = open_ = 0
        redead: list[tuple[str, str | None]] = []
        succeeded: list[str] = []
        for part in chunks(ids, chunk_for(q.dialect)):
            rows = await conn.execute(
                sa.select(q.c("id"), q.c("status"), q.c("error_message")).where(q.isin("id", part))
            )
            for job, raw_status, error in rows.all():
                status = str(plain(raw_status))
                if status in TERMINAL:
                    terminal += 1
                    if status in self.profile.dead_statuses:
                        redead.append((str(plain(job)), error))
                    elif status == "done":
                        succeeded.append(str(plain(job)))
                else:
                    open_ += 1
        return WaveStatus(terminal=terminal, open=open_, redead=redead, succeeded=succeeded)

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        q = await self._table(conn)
        back: list[str] = []
        for item in items:  # each row goes back to its own earlier values
            if not item.original:
                continue
            values = {q.c(c).name: restored(c, item.original.get(c)) for c in RESTORED}
            done = await conn.execute(
                q.table.update()
                .where(
                    q.c("id") == self.profile.coerce_id(q.c("id"), item.job_id),
                    q.c("status") == "queued",
                    q.c("claimed_at").is_(None),
                )
                .values(values)
                .returning(q.c("id"))
            )
            if done.first() is not None:
                back.append(item.job_id)
        return back

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        from services.models import RedriveLog

        log = cast(sa.Table, RedriveLog.__table__)
        if job_ids:
            await conn.execute(
                log.insert(),
                [{"queue": self.profile.queue, "job_id": j, "at": now} for j in job_ids],
            )
