"""Guarded changes on a worker_queue table: the runbook's requeue (failed rows back to
queued, retry count and failure fields cleared) and its cancels (queued duplicates, failed
rows cancelled on purpose). ``failed_permanently`` rows are never cancelled: they are the
record of a job that died after every retry."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import UsageError
from services.estate.ops import (
    Action,
    Applied,
    Frozen,
    Ineligible,
    Selector,
    Target,
    chunk_for,
    chunks,
)
from services.estate.profile import BoundTable, QueueProfile, plain
from services.estate.signature import display_signature, error_signature
from services.estate.worker_queue.schema import ACTIVE, FAILURE_REASONS

RESET_STATES = ("failed", "failed_permanently")  # what a requeue puts back in the queue
CANCEL_STATES = ("queued", "failed")
WHY_NOT = {
    "cancelled": "cancelled on purpose",
    "done": "already done",
    "queued": "already queued",
    "claimed": "claimed by a worker right now",
    "running": "running right now",
    "failed_permanently": "failed_permanently is the record of a job that died after full "
    "retry; it is never cancelled",
}


class WorkerQueueChanges:
    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    async def _table(self, conn: AsyncConnection) -> BoundTable:
        return (await self.profile.tables(conn))["queue"]

    async def freeze(self, conn: AsyncConnection, *, action: Action, selector: Selector) -> Frozen:
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
        allowed = CANCEL_STATES if action is Action.CANCEL else RESET_STATES
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
        """Queued duplicates: all but the most recently queued row of an issue, and every
        queued row whose issue already has a claimed, running or done row."""
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
        action: Action,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        q = await self._table(conn)
        if action is Action.CANCEL:
            values: dict[str, Any] = {q.c("status").name: "cancelled"}
        else:  # requeue and redrive: back to queued, retries and failure fields cleared
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
            if action is Action.CANCEL and state == "queued":  # a duplicate, said so
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
