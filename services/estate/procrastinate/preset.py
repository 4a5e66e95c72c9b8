"""Procrastinate keeps every queue's jobs in ``procrastinate_jobs``: a job is ``failed``
when it ran out of attempts (dead); one that will be retried is ``todo`` again. The row
has no times of its own beyond ``scheduled_at``: its triggers write each change of state
to ``procrastinate_events`` (``deferred``, ``started``, ``failed`` ...), and queuebot
reads a job's times there. It keeps no error text in the database (only its workers' logs
have it), so what needs one is off. A retry is its own SQL function
(``procrastinate_retry_job_v2``: ``todo`` again, one more attempt, a ``retried`` event),
a cancel the same UPDATE as its ``procrastinate_cancel_job_v1``; its workers wake on
``procrastinate_queue_v1#<queue>`` and ``procrastinate_any_queue_v1``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import args_like
from services.estate.model import CanonicalState, JobEvent
from services.estate.ops import Action
from services.estate.profile import as_utc, plain
from services.estate.system import Columns, SystemProfile
from services.estate.system.sql import notify_each
from services.estate.tables import BoundTable, TableSpec

RETRY = "procrastinate_retry_job_v2"


class ProcrastinateProfile(SystemProfile):
    name = "procrastinate"
    system = "Procrastinate"
    default_schema = "public"
    specs = (
        TableSpec(
            "job",
            "procrastinate_jobs",
            required=("id", "queue_name", "task_name", "status", "attempts", "scheduled_at"),
            optional={"args": args_like.ABSENT},
        ),
        TableSpec("events", "procrastinate_events", required=("id", "job_id", "type", "at")),
    )
    cols = Columns(
        id="id",
        state="status",
        queue="queue_name",
        attempts="attempts",
        kind="task_name",
        args="args",
    )
    states = {
        "todo": CanonicalState.PENDING,
        "doing": CanonicalState.IN_FLIGHT,
        "aborting": CanonicalState.IN_FLIGHT,
        "succeeded": CanonicalState.SUCCEEDED,
        "failed": CanonicalState.DEAD,
        "cancelled": CanonicalState.CANCELLED,
        "aborted": CanonicalState.CANCELLED,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    retry_state = "todo"
    cancel_state = "cancelled"
    attempt_bump = 1
    restored = ("status", "attempts", "scheduled_at")
    # its indexes on the status are on todo and doing jobs only: none finds failed ones (a
    # job's times are its events', so the index holds the queue alone)
    dead_index_columns = ("queue_name",)
    # Its functions run with the caller's privileges, and its triggers write an event
    # for each change of state.
    _writes = (
        ("job", "UPDATE", "status"),
        ("job", "UPDATE", "attempts"),
        ("job", "UPDATE", "scheduled_at"),
        ("events", "INSERT", None),
    )
    write_needs = {"requeue": _writes, "redrive": _writes, "cancel": _writes}
    no_error_text = "Procrastinate keeps a job's errors in its workers' logs, not in the database"
    deleted_by = (
        "Procrastinate's worker deletes finished jobs when it is run with --delete-jobs: "
        "successful deletes only jobs that succeeded, always failed ones too"
    )

    def _event_time(
        self, t: Mapping[str, BoundTable], kind: str, pick: Any
    ) -> sa.ColumnElement[Any]:
        """The time of the job's ``kind`` event (``pick``: min for the first, max for the
        latest), from its events."""
        events = t["events"]
        return (
            sa.select(pick(events.c("at")))
            .where(events.c("job_id") == self.col(t, "id"), events.c("type") == kind)
            .scalar_subquery()
        )

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self._event_time(t, "failed", sa.func.max)

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self._event_time(t, "deferred", sa.func.min)

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return sa.func.coalesce(self.col(t, "scheduled_at"), self.enqueued_at(t))

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self._event_time(t, "started", sa.func.max)

    async def missing_functions(self, conn: AsyncConnection) -> list[str]:
        found = await conn.execute(
            sa.select(sa.func.to_regproc(f"{self.schema}.{RETRY}").is_not(None))
        )
        if found.scalar_one():
            return []
        return [
            f"requeue and redrive are off: {self.schema}.{RETRY} is missing (queuebot retries "
            "a Procrastinate job with its own function, which Procrastinate 3 has; apply its "
            "migrations)"
        ]

    def _function(self, name: str) -> Any:
        return getattr(getattr(sa.func, self.schema), name)

    async def write(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        action: Action,
        guard: sa.ColumnElement[bool],
        now: datetime,
    ) -> list[tuple[Any, str]]:
        """A retry is Procrastinate's own function, once per guarded row (already locked).
        A cancel is the UPDATE its ``procrastinate_cancel_job_v1`` makes of a waiting job,
        made here of a dead one too (the function takes waiting jobs only)."""
        if action is Action.CANCEL:
            return await super().write(conn, t, action, guard, now)
        q = self.job(t)
        id_col, queue = q.c("id"), q.c("queue_name")
        rows = (await conn.execute(sa.select(id_col, queue).where(guard))).all()
        if not rows:
            return []
        ids = [r[0] for r in rows]
        each = (
            sa.func.unnest(sa.literal(ids, postgresql.ARRAY(sa.BigInteger)))
            .table_valued(sa.column("job_id", sa.BigInteger))
            .render_derived()
        )
        job = each.c.job_id
        none_int = sa.cast(sa.null(), sa.Integer)
        none_text = sa.cast(sa.null(), sa.String)
        call = self._function(RETRY)(job, sa.func.now(), none_int, none_text, none_text)
        await conn.execute(sa.select(call).select_from(each))
        return [(r[0], str(r[1])) for r in rows]

    async def notify(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], changed: Sequence[tuple[Any, str]]
    ) -> None:
        """One wake-up per queue (a worker fetches every job it may run when woken)."""
        first: dict[str, Any] = {}
        for job, queue in changed:
            first.setdefault(queue, job)
        for queue, job in sorted(first.items()):
            payload = {"type": "job_inserted", "job_id": int(job)}
            await notify_each(conn, f"procrastinate_queue_v1#{queue}", [payload])
        if first:
            queue, job = min(first.items())
            await notify_each(
                conn, "procrastinate_any_queue_v1", [{"type": "job_inserted", "job_id": int(job)}]
            )

    async def history(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], row: Mapping[Any, Any]
    ) -> tuple[list[JobEvent], str | None]:
        events = t["events"]
        job = row[self.col(t, "id").name]
        rows = await conn.execute(
            sa.select(events.c("type"), events.c("at"))
            .where(events.c("job_id") == job)
            .order_by(events.c("at"), events.c("id"))
        )
        out = [JobEvent(str(plain(kind)), None, as_utc(at)) for kind, at in rows.all()]
        return out, ("Procrastinate keeps no error text in the database; its workers' logs have it")
