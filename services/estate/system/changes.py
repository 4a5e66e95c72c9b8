"""Guarded changes on a preset's jobs table: a requeue or redrive retries a job the way its
system retries it (one more attempt, its finished-at columns cleared, its error history
kept; its own SQL function where it has one), a cancel cancels a job that has not run,
each only on rows still in the state they were judged in, and the system's NOTIFY goes
out with the commit so its workers pick the retried jobs up at once.

A job the system deleted since the request (its pruner removes finished jobs after a
while) is reported as skipped, never recreated."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import PreconditionFailed, UsageError
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
from services.estate.profile import plain
from services.estate.signature import display_signature, error_signature
from services.estate.system.base import STATE
from services.estate.tables import BoundTable

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase

# What a retry takes (a job in the system's failed or dead state) and what a cancel
# takes: a job that is waiting, failed and waiting for the system's own retry, or dead
# (cancelling a dead job is how an operator abandons it: it leaves the dead jobs and is
# never redriven). A running job is its system's to stop.
RETRY_STATES = (CanonicalState.FAILED, CanonicalState.DEAD)
CANCEL_STATES = (CanonicalState.PENDING, CanonicalState.FAILED, CanonicalState.DEAD)
WHY_NOT = {
    CanonicalState.CANCELLED: "cancelled on purpose",
    CanonicalState.SUCCEEDED: "already succeeded",
    CanonicalState.PENDING: "already waiting to run",
    CanonicalState.IN_FLIGHT: "a worker is running it right now",
    CanonicalState.UNKNOWN: "a state queuebot does not know; never acted on",
}


def failure_signature(error: str | None) -> str:
    """A failed job's signature: its error text's (the same for every preset)."""
    return display_signature(error_signature(error))


class SystemChanges:
    def __init__(self, profile: SystemBase) -> None:
        self.profile = profile

    def _columns(self, t: Mapping[str, BoundTable]) -> list[Any]:
        """The row as frozen, and its error text (as ``error``) where the system keeps it."""
        q = self.profile.job(t)
        error = self.profile.error_text(t)
        state = self.profile.state_value(t).label(STATE)
        return [q.table, state, *([error.label("qb_error")] if error is not None else [])]

    def _target(self, t: Mapping[str, BoundTable], row: sa.Row[Any]) -> Target:
        p, q = self.profile, self.profile.job(t)
        m = row._mapping
        image = {k: v for k, v in m.items() if k not in ("qb_error", STATE)}
        key = plain(m[q.c(p.cols.id).name])
        return Target(
            id=str(key),
            key={"id": key},
            state=str(plain(m[STATE])),
            signature=failure_signature(m.get("qb_error")),
            row=image,
        )

    async def freeze(self, conn: AsyncConnection, *, action: Action, selector: Selector) -> Frozen:
        p = self.profile
        t = await p.tables(conn)  # reflected first: the check reads its types
        p.check_writable(action)
        await self._check_functions(conn, action)
        q = p.job(t)
        if action is Action.CANCEL and p.cancel_off is not None:
            raise PreconditionFailed(f"cancel on queue {p.queue!r} is off: {p.cancel_off}")
        if selector.duplicates or selector.failure_reason is not None:
            what = "duplicate jobs" if selector.duplicates else "failure reasons"
            raise UsageError(
                f"queue {p.queue!r} ({p.system}) keeps no {what}; name the job ids instead"
            )
        id_col = q.c(p.cols.id)
        keys = {raw: p.coerce_id(id_col, raw) for raw in selector.ids}
        found: dict[Any, sa.Row[Any]] = {}
        for part in chunks(list(keys.values()), chunk_for(q.dialect)):
            query = sa.select(*self._columns(t)).where(q.isin(p.cols.id, part), *p.scope(t))
            for r in (await conn.execute(query)).all():
                found[r._mapping[id_col.name]] = r
        allowed = CANCEL_STATES if action is Action.CANCEL else RETRY_STATES
        targets: list[Target] = []
        ineligible: list[Ineligible] = []
        for raw, key in keys.items():
            row = found.get(key)
            if row is None:
                ineligible.append(Ineligible(raw, "not found"))
                continue
            status = str(plain(row._mapping[STATE]))
            state = p.canonical(status)
            if state in allowed:
                targets.append(self._target(t, row))
            else:
                ineligible.append(Ineligible(raw, f"{status}: {WHY_NOT.get(state, status)}"))
        return Frozen(targets, ineligible)

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
        p = self.profile
        t = await p.tables(conn)  # reflected first: the check reads its types
        p.check_writable(action)
        await self._check_functions(conn, action)
        q = p.job(t)
        id_col = q.c(p.cols.id)
        by_state: dict[str, list[Target]] = defaultdict(list)
        for target in targets:
            by_state[target.state].append(target)
        changed: list[tuple[Any, str]] = []
        before: list[tuple[str, dict[str, Any]]] = []
        for state, group in by_state.items():
            ids = [p.coerce_id(id_col, target.id) for target in group]
            for part in chunks(ids, chunk_for(q.dialect)):
                guard = sa.and_(q.isin(p.cols.id, part), p.in_states(t, [state]), *p.scope(t))
                judged = sa.select(q.table).where(guard)
                rows = await conn.execute(judged.with_for_update() if p.locks_rows else judged)
                before.extend(
                    (str(plain(r._mapping[id_col.name])), dict(r._mapping)) for r in rows.all()
                )
                changed.extend(await p.write(conn, t, action, guard, now))
        if changed and action is not Action.CANCEL:
            await p.notify(conn, t, changed)
        moved = {str(plain(key)) for key, _ in changed}
        left = [target for target in targets if target.id not in moved]
        gone = await self._gone(conn, t, left)
        skipped = [
            Ineligible(
                target.id,
                f"no longer in {q.name} ({p.gone_why.format(system=p.system)})"
                if target.id in gone
                else f"moved on since the request (was {target.state})",
            )
            for target in left
        ]
        return Applied(changed=sorted(moved, key=_order), skipped=skipped, before=before)

    async def _check_functions(self, conn: AsyncConnection, action: Action) -> None:
        """Refuse a retry where the system's own function it calls is missing."""
        if action is Action.CANCEL:
            return
        missing = await self.profile.missing_functions(conn)
        if missing:
            raise PreconditionFailed(
                f"{action.value} on queue {self.profile.queue!r}: {missing[0]}"
            )

    async def _gone(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], left: list[Target]
    ) -> set[str]:
        """Of ``left``, the jobs no longer in the table at all."""
        if not left:
            return set()
        p, q = self.profile, self.profile.job(t)
        id_col = q.c(p.cols.id)
        ids = [p.coerce_id(id_col, target.id) for target in left]
        present: set[str] = set()
        for part in chunks(ids, chunk_for(q.dialect)):
            rows = await conn.execute(sa.select(id_col).where(q.isin(p.cols.id, part)))
            present.update(str(plain(r[0])) for r in rows.all())
        return {target.id for target in left} - present


def _order(job: str) -> tuple[int, int | str]:
    return (0, int(job)) if job.lstrip("-").isdigit() else (1, job)
