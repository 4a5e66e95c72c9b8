"""Que keeps every queue's jobs in ``que_jobs``. It has no state column: a job is dead when
``expired_at`` is set (it ran out of retries), finished when ``finished_at`` is set (where a
job keeps itself), and otherwise waits to run, counting its failures in ``error_count``.
A job that succeeds is deleted (Que's default), and a worker holds a job by an advisory
lock, not in the table: queuebot cannot see which jobs are running. Que keeps no enqueue
time, and the error of a job's final attempt is not written (``last_error_message`` holds
the one before). It has no NOTIFY its workers use: they poll (every 5 s by default).

queuebot's names for what the columns say: ``ready``, ``errored`` (both pending),
``finished`` (succeeded) and ``expired`` (dead). A retry is Que's own: ``expired_at``
cleared, ``error_count`` reset, ``run_at`` now. A cancel deletes the job, as Que's own
``destroy`` does (the audit trail keeps the row as it was)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import args_like
from services.estate.model import CanonicalState
from services.estate.ops import Action
from services.estate.system import Columns, SystemProfile
from services.estate.system.base import PendingIndex
from services.estate.tables import BoundTable, TableSpec

READY, ERRORED, FINISHED, EXPIRED = "ready", "errored", "finished", "expired"


class QueProfile(SystemProfile):
    name = "que"
    system = "Que"
    default_schema = "public"
    specs = (
        TableSpec(
            "job",
            "que_jobs",
            required=(
                "id",
                "queue",
                "job_class",
                "run_at",
                "error_count",
                "last_error_message",
                "finished_at",
                "expired_at",
            ),
            optional={
                "args": args_like.ABSENT,
                "kwargs": "keyword arguments (Que 2's) are not searched by --args-like",
            },
        ),
    )
    cols = Columns(
        id="id", state="state", queue="queue", attempts="error_count", kind="job_class", args="args"
    )
    derived_states = True
    success_deletes = True
    gone_why = "{system} deletes a job when it succeeds or is destroyed"
    states = {
        READY: CanonicalState.PENDING,
        ERRORED: CanonicalState.PENDING,
        FINISHED: CanonicalState.SUCCEEDED,
        EXPIRED: CanonicalState.DEAD,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    retry_state = READY
    restored = ("expired_at", "error_count", "run_at")
    attempts_label = "errors"  # error_count: the attempts that failed
    # its poll index holds the unfinished, unexpired jobs only: none finds expired ones
    dead_index_columns = ("queue", "expired_at")
    write_needs = {
        "requeue": tuple(("job", "UPDATE", c) for c in restored),
        "redrive": tuple(("job", "UPDATE", c) for c in restored),
        "cancel": (("job", "DELETE", None),),
    }

    def state_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return sa.case(
            (self.col(t, "expired_at").is_not(None), EXPIRED),
            (self.col(t, "finished_at").is_not(None), FINISHED),
            (self.col(t, "error_count") > 0, ERRORED),
            else_=READY,
        )

    def state_where(self, t: Mapping[str, BoundTable], value: str) -> sa.ColumnElement[bool]:
        expired, finished = self.col(t, "expired_at"), self.col(t, "finished_at")
        if value == EXPIRED:
            return expired.is_not(None)
        if value == FINISHED:
            return sa.and_(expired.is_(None), finished.is_not(None))
        errors = self.col(t, "error_count")
        waiting = sa.and_(expired.is_(None), finished.is_(None))
        return sa.and_(waiting, errors > 0 if value == ERRORED else errors == 0)

    def attempts_after_retry(self, before: int) -> int:
        return 0  # Que's retry resets the count of failures

    def arguments(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """``args`` and, since Que 2, ``kwargs`` (a job's keyword arguments), as one text."""
        args = super().arguments(t)
        if args is None or not self.job(t).has("kwargs"):
            return args
        return sa.cast(args, sa.Text) + " " + sa.cast(self.col(t, "kwargs"), sa.Text)

    def oldest_pending_index(self, t: Mapping[str, BoundTable]) -> PendingIndex | None:
        """Its ``que_poll_idx``: ``(job_schema_version, queue, priority, run_at, id)`` of
        the jobs neither finished nor expired (queuebot's ready and errored), Que 2's."""
        table = self.job(t).table
        if "job_schema_version" not in table.c:  # Que 1's poll index is another
            return None
        prefix = (table.c.job_schema_version, self.col(t, "queue"), table.c.priority)
        waiting = sa.and_(self.col(t, "finished_at").is_(None), self.col(t, "expired_at").is_(None))
        return PendingIndex(table, prefix, self.col(t, "run_at"), waiting)

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "last_error_message")

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "expired_at")

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "run_at")

    def usable(self, t: Mapping[str, BoundTable]) -> list[str]:
        return [
            *super().usable(t),
            "Que does not write its final attempt's error: a dead job shows the error of "
            "the attempt before it",
            "Que marks no running job in its table (a worker holds a job by an advisory "
            "lock): no stuck jobs are reported, and a rollback may return a job a worker "
            "has just taken",
            "Que keeps no enqueue time: triage's --since is off",
        ]

    def retry_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        return {"expired_at": None, "error_count": 0, "run_at": sa.func.now()}

    async def write(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        action: Action,
        guard: sa.ColumnElement[bool],
        now: datetime,
    ) -> list[tuple[Any, str]]:
        if action is not Action.CANCEL:
            return await super().write(conn, t, action, guard, now)
        q = self.job(t)
        done = await conn.execute(q.table.delete().where(guard).returning(q.c("id"), q.c("queue")))
        return [(r[0], str(r[1])) for r in done.all()]
