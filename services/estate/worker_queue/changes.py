"""Guarded changes on a worker_queue table: the runbook's requeue (failed rows back to
queued, retry count and failure fields cleared) and its cancels (queued duplicates, failed
rows cancelled on purpose). ``failed_permanently`` rows are never cancelled: they are the
record of a job that died after every retry. Columns the team's table lacks are neither
read nor cleared; statuses go by their canonical state, so a team's own values count."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import UsageError
from services.estate.model import CanonicalState
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
from services.estate.profile import QueueProfile, plain
from services.estate.signature import display_signature, error_signature
from services.estate.tables import BoundTable
from services.estate.worker_queue.schema import ACTIVE, CANCELLED, FAILURE_REASONS, QUEUED

# What a requeue or redrive puts back in the queue, and what a cancel takes: by state, so
# a team's own values for these states ([statuses]) count as the profile's do.
RESET_STATES = (CanonicalState.FAILED, CanonicalState.DEAD)
CANCEL_STATES = (CanonicalState.PENDING, CanonicalState.FAILED)
WHY_NOT = {
    "cancelled": "cancelled on purpose",
    "done": "already done",
    "queued": "already queued",
    "claimed": "claimed by a worker right now",
    "running": "running right now",
    "failed_permanently": "failed_permanently is the record of a job that died after full "
    "retry; it is never cancelled",
}
WHY_NOT_STATE = {
    CanonicalState.CANCELLED: "cancelled on purpose",
    CanonicalState.SUCCEEDED: "already done",
    CanonicalState.PENDING: "already queued",
    CanonicalState.IN_FLIGHT: "a worker holds it right now",
    CanonicalState.DEAD: "a dead row is the record of a job that died after full retry; it "
    "is never cancelled",
    CanonicalState.UNKNOWN: "a status queuebot does not know; never acted on",
}
# What a requeue or redrive clears, where the team's table has it.
CLEARED = (
    "failure_reason",
    "error_message",
    "next_attempt_at",
    "server_node",
    "claimed_at",
    "started_at",
)


# How versions before the signature was made one way froze a failed row of a table
# without failure_reason: a plan frozen then may still be running.
EARLIER_UNLABELLED = "(no failure_reason): "


def failure_signature(q: BoundTable, row: Mapping[Any, Any]) -> str:
    """A failed row's signature, as a request's preview groups it and a plan compares a
    row that died again with it: its failure_reason and its error's signature where the
    table has a failure_reason column, the error's signature alone where it has none.
    ``row``: the row's columns by their names in the table."""
    sig = display_signature(error_signature(row[q.c("error_message").name]))
    if not q.has("failure_reason"):
        return sig
    reason = row[q.c("failure_reason").name]
    return f"{plain(reason) if reason is not None else '(no failure_reason)'}: {sig}"


class WorkerQueueChanges:
    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    async def _table(self, conn: AsyncConnection) -> BoundTable:
        return (await self.profile.tables(conn))["queue"]

    def _no_column(self, column: str, what: str) -> UsageError:
        return UsageError(
            f"queue {self.profile.queue!r} (worker_queue) has no {column} column, so {what}; "
            "name the job ids instead"
        )

    async def freeze(self, conn: AsyncConnection, *, action: Action, selector: Selector) -> Frozen:
        q = await self._table(conn)  # reflected first: the check reads its types
        self.profile.check_writable(action)
        if selector.duplicates:
            if not q.has("issue_number"):
                raise self._no_column("issue_number", "duplicate queued rows cannot be found")
            return await self._duplicates(conn, q)
        if selector.failure_reason is not None:
            if not q.has("failure_reason"):
                raise self._no_column("failure_reason", "--failure-reason selects nothing")
            if selector.failure_reason not in FAILURE_REASONS:
                raise UsageError(
                    f"unknown failure reason {selector.failure_reason!r}; "
                    f"expected one of {', '.join(FAILURE_REASONS)}"
                )
            rows = (
                await conn.execute(
                    sa.select(q.table)
                    .where(
                        q.c("status").in_(self.profile.statuses_in(CanonicalState.FAILED)),
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
            state = self.profile.canonical(status)
            if state in allowed:
                targets.append(self._target(q, row))
            else:
                why = WHY_NOT.get(status) or WHY_NOT_STATE.get(state, f"is {status}")
                ineligible.append(Ineligible(raw, f"{status}: {why}"))
        return Frozen(targets, ineligible)

    async def _duplicates(self, conn: AsyncConnection, q: BoundTable) -> Frozen:
        """Queued duplicates: all but the most recently queued row of an issue, and every
        queued row whose issue already has a claimed, running or done row."""
        issue, status = q.c("issue_number"), q.c("status")
        pending = self.profile.statuses_in(CanonicalState.PENDING)
        queued = (
            await conn.execute(
                sa.select(q.table)
                .where(status.in_(pending), issue.is_not(None))
                .order_by(issue, q.c("queued_at").desc(), q.c("id").desc())
            )
        ).all()
        queued_issues = sa.select(issue).where(status.in_(pending))
        active = self.profile.statuses_in(*ACTIVE)
        busy = set(
            (
                await conn.execute(
                    sa.select(issue).where(status.in_(active), issue.in_(queued_issues)).distinct()
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
        key = plain(m[q.c("id").name])
        pending = self.profile.canonical(status) is CanonicalState.PENDING
        return Target(
            id=str(key),
            key={"id": key},
            state=status,
            signature="duplicate queued" if pending else failure_signature(q, m),
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
        q = await self._table(conn)  # reflected first: the check reads its types
        self.profile.check_writable(action)
        if action is Action.CANCEL:
            values: dict[str, Any] = {q.c("status").name: CANCELLED}
        else:  # requeue and redrive: back to queued, retries and failure fields cleared
            values = {q.c(c).name: None for c in CLEARED if q.has(c)}
            values[q.c("status").name] = QUEUED
            if q.has("retry_count"):
                values[q.c("retry_count").name] = 0
        by_state: dict[str, list[Target]] = defaultdict(list)
        for t in targets:
            by_state[t.state].append(t)
        changed: list[str] = []
        before: list[tuple[str, dict[str, Any]]] = []
        id_name = q.c("id").name
        for state, group in by_state.items():
            extra: dict[str, Any] = {}
            pending = self.profile.canonical(state) is CanonicalState.PENDING
            if action is Action.CANCEL and pending:  # a duplicate, said so
                extra[q.c("error_message").name] = (
                    "manually cancelled: duplicate queued row"
                    if duplicates
                    else f"manually cancelled: {note}"[:500]
                )
                if q.has("failure_reason"):
                    extra[q.c("failure_reason").name] = "other"
            ids = [self.profile.coerce_id(q.c("id"), t.id) for t in group]
            for part in chunks(ids, chunk_for(q.dialect)):
                guard = sa.and_(q.isin("id", part), q.c("status") == state)
                rows = await conn.execute(sa.select(q.table).where(guard).with_for_update())
                before.extend(
                    (str(plain(r._mapping[id_name])), dict(r._mapping)) for r in rows.all()
                )
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
