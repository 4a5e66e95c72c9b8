"""Solid Queue keeps every queue's jobs in ``solid_queue_jobs`` and a job's state in which
execution table holds a row for it: ``solid_queue_ready_executions`` (ready to run),
``_scheduled_executions``, ``_blocked_executions`` (waiting on a concurrency limit),
``_claimed_executions`` (a worker runs it) or ``_failed_executions`` (it failed: dead, as
Active Job's own retries make new job rows). A finished job has ``finished_at``. The
failure's error is JSON in a TEXT column (``exception_class``, ``message``,
``backtrace``); times are kept without a zone, in UTC. Its workers poll (every 0.1 s by
default): it has no NOTIFY.

A retry is Solid Queue's own, in one transaction: the job gets a ready execution and its
failed execution is deleted. A rollback deletes the ready execution a worker has not
claimed and puts the failed one back with its error. A cancel is Solid Queue's discard:
the job and its executions are deleted (the audit trail keeps the job as it was)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.model import CanonicalState, JobEvent
from services.estate.ops import Action
from services.estate.profile import as_utc, plain
from services.estate.system import Columns, SystemProfile
from services.estate.system.base import KEPT, PassSource
from services.estate.system.sql import utc
from services.estate.tables import BoundTable, TableSpec

FAILED, CLAIMED, READY, SCHEDULED, BLOCKED, FINISHED = (
    "failed",
    "claimed",
    "ready",
    "scheduled",
    "blocked",
    "finished",
)
# the execution tables, by the state a row in each means (the first found wins)
EXECUTIONS = (
    (FAILED, "failed"),
    (CLAIMED, "claimed"),
    (READY, "ready"),
    (SCHEDULED, "scheduled"),
    (BLOCKED, "blocked"),
)
ERROR = KEPT + "error"  # the failed execution's error, kept for a rollback
FAILED_AT = KEPT + "failed_at"


def _execution(role: str, default: str, *columns: str, absent: str | None = None) -> TableSpec:
    return TableSpec(role, default, required=("job_id", *columns), absent=absent)


def _error(kept: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """A failed execution's error (JSON in a TEXT column) as "class: message"."""
    error = sa.cast(kept, postgresql.JSONB)
    return sa.func.concat_ws(": ", error["exception_class"].astext, error["message"].astext)


def _failed_error(failed: BoundTable, job: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """The error of the failed execution of the job whose id is ``job``, looked up."""
    found = sa.select(_error(failed.c("error"))).where(failed.c("job_id") == job).limit(1)
    return found.scalar_subquery()


class SolidQueueProfile(SystemProfile):
    name = "solid_queue"
    system = "Solid Queue"
    default_schema = "public"
    specs = (
        TableSpec(
            "job",
            "solid_queue_jobs",
            required=(
                "id",
                "queue_name",
                "class_name",
                "arguments",
                "priority",
                "scheduled_at",
                "finished_at",
                "created_at",
            ),
        ),
        _execution("failed", "solid_queue_failed_executions", "error", "created_at"),
        _execution("claimed", "solid_queue_claimed_executions", "created_at"),
        _execution("ready", "solid_queue_ready_executions", "queue_name", "priority", "created_at"),
        _execution(
            "scheduled",
            "solid_queue_scheduled_executions",
            absent="no scheduled jobs are told apart (they read as unknown)",
        ),
        _execution(
            "blocked",
            "solid_queue_blocked_executions",
            absent="no blocked jobs are told apart (they read as unknown)",
        ),
    )
    cols = Columns(
        id="id",
        state="state",
        queue="queue_name",
        attempts="executions",
        kind="class_name",
        args="arguments",
    )
    derived_states = True
    set_on_success = "finished_at"  # kept until its clear_finished_jobs
    states = {
        READY: CanonicalState.PENDING,
        SCHEDULED: CanonicalState.PENDING,
        BLOCKED: CanonicalState.PENDING,
        CLAIMED: CanonicalState.IN_FLIGHT,
        FINISHED: CanonicalState.SUCCEEDED,
        FAILED: CanonicalState.DEAD,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    retry_state = READY
    restored = ()
    write_needs = {
        "requeue": (("ready", "INSERT", None), ("failed", "DELETE", None)),
        "redrive": (("ready", "INSERT", None), ("failed", "DELETE", None)),
        "cancel": (("job", "DELETE", None), ("failed", "DELETE", None), ("ready", "DELETE", None)),
    }

    def _held(self, t: Mapping[str, BoundTable], role: str) -> sa.ColumnElement[bool]:
        """The job has a row in the ``role`` execution table."""
        table = t.get(role)
        if table is None:
            return sa.false()
        return sa.exists().where(table.c("job_id") == self.col(t, "id"))

    def not_succeeded(self, t: Mapping[str, BoundTable], succeeded: str) -> sa.ColumnElement[bool]:
        """The jobs without ``finished_at``: Solid Queue deletes a job's execution in the
        transaction that sets it, so a finished job holds none (a test of the five
        execution tables for each of a large table's finished jobs would cost five
        lookups a row)."""
        return self.col(t, "finished_at").is_(None)

    def state_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        whens = [(self._held(t, role), state) for state, role in EXECUTIONS if role in t]
        whens.append((self.col(t, "finished_at").is_not(None), FINISHED))
        return sa.case(*whens, else_="unknown")

    def state_where(self, t: Mapping[str, BoundTable], value: str) -> sa.ColumnElement[bool]:
        if value == FINISHED:
            held = [self._held(t, role) for _, role in EXECUTIONS if role in t]
            return sa.and_(self.col(t, "finished_at").is_not(None), *(sa.not_(h) for h in held))
        role = dict(EXECUTIONS)[value]
        earlier = [r for s, r in EXECUTIONS[: [s for s, _ in EXECUTIONS].index(value)]]
        return sa.and_(self._held(t, role), *(sa.not_(self._held(t, r)) for r in earlier if r in t))

    def pass_source(self, t: Mapping[str, BoundTable]) -> PassSource:
        """The jobs LEFT JOINed to each execution table there is (Solid Queue keeps at
        most one row per job in each: its ``job_id`` is unique), so the state is which
        join found a row (in ``EXECUTIONS``' order, as ``state_value``), the error and the
        time it died the failed execution's, and the start the claimed one's: each table
        is read once for the whole pass instead of looked up once per job. Of a dead job
        the pass keeps its id alone, and the newest dead jobs' errors are looked up by it
        (JSON read for those few, not carried for every dead job)."""
        q = self.job(t)
        source: sa.FromClause = q.table
        held: dict[str, sa.ColumnElement[bool]] = {}
        found: dict[str, sa.FromClause] = {}
        for _, role in EXECUTIONS:
            table = t.get(role)
            if table is None:
                continue
            x = found[role] = table.table.alias(f"qb_{role}")
            job = x.c[table.c("job_id").name]
            source = source.outerjoin(x, job == self.col(t, "id"))
            held[role] = job.is_not(None)
        whens = [(held[role], state) for state, role in EXECUTIONS if role in held]
        whens.append((self.col(t, "finished_at").is_not(None), FINISHED))
        failed, claimed = found["failed"], found["claimed"]
        return PassSource(
            source,
            sa.case(*whens, else_="unknown"),
            failed.c[t["failed"].c("job_id").name],
            utc(failed.c[t["failed"].c("created_at").name]),
            utc(claimed.c[t["claimed"].c("created_at").name]),
            shown=lambda job: _failed_error(t["failed"], job),
            joined=True,
        )

    def attempts_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        """Active Job's count of the job's runs, kept in its serialized arguments."""
        args = sa.cast(self.col(t, "arguments"), postgresql.JSONB)
        return sa.cast(args["executions"].astext, sa.Integer)

    def _failure(self, t: Mapping[str, BoundTable], column: str) -> sa.ColumnElement[Any]:
        failed = t["failed"]
        return (
            sa.select(failed.c(column))
            .where(failed.c("job_id") == self.col(t, "id"))
            .limit(1)
            .scalar_subquery()
        )

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return _error(self._failure(t, "error"))

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self._failure(t, "created_at"))

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "created_at"))

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(sa.func.coalesce(self.col(t, "scheduled_at"), self.col(t, "created_at")))

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        claimed = t["claimed"]
        return utc(
            sa.select(claimed.c("created_at"))
            .where(claimed.c("job_id") == self.col(t, "id"))
            .limit(1)
            .scalar_subquery()
        )

    async def write(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        action: Action,
        guard: sa.ColumnElement[bool],
        now: datetime,
    ) -> list[tuple[Any, str]]:
        q, failed = self.job(t), t["failed"]
        rows = (
            await conn.execute(
                sa.select(q.c("id"), q.c("queue_name"), q.c("priority")).where(guard)
            )
        ).all()
        ids = [r[0] for r in rows]
        if not ids:
            return []
        if action is Action.CANCEL:  # Solid Queue's discard: the job and its executions
            for role in ("failed", "claimed", "ready", "scheduled", "blocked"):
                table = t.get(role)
                if table is not None:
                    await conn.execute(table.table.delete().where(table.c("job_id").in_(ids)))
            await conn.execute(q.table.delete().where(q.c("id").in_(ids)))
        else:  # Solid Queue's retry: a ready execution, and the failed one deleted
            ready = t["ready"]
            await conn.execute(
                ready.table.insert(),
                [
                    {
                        ready.c("job_id").name: job,
                        ready.c("queue_name").name: queue,
                        ready.c("priority").name: priority,
                        ready.c("created_at").name: now.replace(tzinfo=None),
                    }
                    for job, queue, priority in rows
                ],
            )
            await conn.execute(failed.table.delete().where(failed.c("job_id").in_(ids)))
        return [(r[0], str(r[1])) for r in rows]

    async def kept_elsewhere(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], ids: Sequence[Any]
    ) -> dict[str, dict[str, Any]]:
        failed = t["failed"]
        rows = await conn.execute(
            sa.select(failed.c("job_id"), failed.c("error"), failed.c("created_at")).where(
                failed.c("job_id").in_(list(ids))
            )
        )
        return {
            str(plain(job)): {ERROR: error, FAILED_AT: plain(at).isoformat() if at else None}
            for job, error, at in rows.all()
        }

    async def restore(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        guard: sa.ColumnElement[bool],
        values: Mapping[str, Any],
    ) -> bool:
        """The ready execution nobody claimed deleted, the failed one back with its error."""
        q, ready, failed = self.job(t), t["ready"], t["failed"]
        job = (
            await conn.execute(sa.select(q.c("id")).where(guard).with_for_update())
        ).scalar_one_or_none()
        if job is None or ERROR not in values:
            return False
        gone = await conn.execute(
            ready.table.delete().where(ready.c("job_id") == job).returning(ready.c("job_id"))
        )
        if gone.first() is None:
            return False
        at = values.get(FAILED_AT)
        await conn.execute(
            failed.table.insert().values(
                {
                    failed.c("job_id").name: job,
                    failed.c("error").name: values[ERROR],
                    failed.c("created_at").name: (
                        datetime.fromisoformat(at).replace(tzinfo=None) if at else sa.func.now()
                    ),
                }
            )
        )
        return True

    async def history(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], row: Mapping[Any, Any]
    ) -> tuple[list[JobEvent], str | None]:
        failed = t["failed"]
        job = row[self.col(t, "id").name]
        found = (
            await conn.execute(
                sa.select(failed.c("error"), failed.c("created_at")).where(
                    failed.c("job_id") == job
                )
            )
        ).first()
        note = "Solid Queue keeps a job's latest failure only (Active Job's retries are new jobs)"
        if found is None:
            return [], note
        return [JobEvent("failed", str(found[0]), as_utc(found[1]))], note
