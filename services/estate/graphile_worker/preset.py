"""graphile-worker keeps every queue's jobs in ``graphile_worker._private_jobs``, private by
design: it is read through the ``graphile_worker.jobs`` view and changed only through the
system's own SQL functions. It has no state column. A job is dead when it used up its
attempts (``attempts >= max_attempts``) and no worker holds it (its worker counts an
attempt when it takes a job, so a job on its last attempt is running, not dead); one
that failed and has attempts left waits to be retried by the system itself
(``last_error`` set); a worker holds a job while ``locked_at`` is set; and a job that
succeeds is deleted. Its workers wake on ``jobs:insert``.

queuebot's names for what the columns say: ``waiting``, ``retrying`` (both pending),
``locked`` (running) and ``dead``. A retry is ``reschedule_jobs`` (runnable now, one more
attempt allowed: ``max_attempts`` raised to ``attempts + 1``; ``attempts`` and
``last_error`` kept); a cancel is ``complete_jobs``, the system's way to drop a job (it
deletes it: the audit trail keeps the row as it was). Both skip a job a worker holds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import args_like
from services.estate.estimate import Sample
from services.estate.model import CanonicalState
from services.estate.ops import Action
from services.estate.system import Columns, SystemProfile
from services.estate.system.base import PendingIndex
from services.estate.system.sql import notify_each
from services.estate.tables import BoundTable, TableSpec

WAITING, RETRYING, LOCKED, DEAD = "waiting", "retrying", "locked", "dead"
FUNCTIONS = ("reschedule_jobs", "complete_jobs")


class GraphileWorkerProfile(SystemProfile):
    name = "graphile-worker"
    system = "graphile-worker"
    default_schema = "graphile_worker"
    specs = (
        TableSpec(
            "job",
            "jobs",
            required=(
                "id",
                "queue_name",
                "task_identifier",
                "run_at",
                "attempts",
                "max_attempts",
                "last_error",
                "created_at",
                "updated_at",
                "locked_at",
            ),
        ),
        # the private table its functions change: for the privileges they need, and the
        # job's arguments (``payload``), which the view leaves out
        TableSpec(
            "private", "_private_jobs", required=("id",), optional={"payload": args_like.ABSENT}
        ),
    )
    cols = Columns(
        id="id",
        state="state",
        queue="queue_name",
        attempts="attempts",
        kind="task_identifier",
        max_attempts="max_attempts",
        args="payload",
    )
    derived_states = True
    success_deletes = True
    locks_rows = False  # a view; its functions skip a job a worker holds
    gone_why = "{system} deletes a job when it succeeds or is removed"
    states = {
        WAITING: CanonicalState.PENDING,
        RETRYING: CanonicalState.PENDING,
        LOCKED: CanonicalState.IN_FLIGHT,
        DEAD: CanonicalState.DEAD,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    retry_state = RETRYING
    restored = ("attempts", "max_attempts", "run_at")
    # Its functions are plain SQL run with the caller's privileges.
    write_needs = {
        "requeue": (("private", "UPDATE", None),),
        "redrive": (("private", "UPDATE", None),),
        "cancel": (("private", "DELETE", None),),
    }

    @property
    def unclaimed_states(self) -> tuple[str, ...]:
        return (WAITING, RETRYING)  # a dead job without an error waits as "waiting"

    def _spent(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[bool]:
        """Dead: every attempt used and no worker holding it. graphile-worker counts an
        attempt when a worker takes the job, so a job running its last attempt (a redriven
        one, allowed one more) has spent its attempts while it runs: it is running."""
        return sa.and_(
            self.col(t, "attempts") >= self.col(t, "max_attempts"),
            self.col(t, "locked_at").is_(None),
        )

    def state_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return sa.case(
            (self.col(t, "locked_at").is_not(None), LOCKED),
            (self._spent(t), DEAD),
            (self.col(t, "last_error").is_not(None), RETRYING),
            else_=WAITING,
        )

    def state_where(self, t: Mapping[str, BoundTable], value: str) -> sa.ColumnElement[bool]:
        if value == DEAD:
            return self._spent(t)
        locked, error = self.col(t, "locked_at"), self.col(t, "last_error")
        live = sa.not_(self._spent(t))
        if value == LOCKED:
            return locked.is_not(None)
        if value == RETRYING:
            return sa.and_(live, locked.is_(None), error.is_not(None))
        return sa.and_(live, locked.is_(None), error.is_(None))

    dead_index_columns = ("job_queue_id", "updated_at")  # the private table's (see below)

    def dead_index_on(
        self, t: Mapping[str, BoundTable]
    ) -> tuple[sa.Table, tuple[str, ...], sa.ColumnElement[bool]] | None:
        """On the private table (a view has no index): its indexes hold the available jobs
        only, none the dead ones. The view's columns of the condition are the table's own,
        and its queue is the table's ``job_queue_id``, which the view joins a name to."""
        private = t["private"].table
        return private, self.dead_index_columns, self._spent(t)

    def sample_table(self, t: Mapping[str, BoundTable]) -> sa.Table:
        return t["private"].table  # the view has no pages, nor statistics of its own

    def sampled(
        self, t: Mapping[str, BoundTable], sample: Sample
    ) -> tuple[dict[str, BoundTable], sa.ColumnElement[Any]]:
        """A sample of the private table's pages with the view's columns that say a job's
        state and its task (its name from the tasks table, as the view joins it). Read
        as the private table (row security may hide its jobs from a role that reads them
        through the view: a sample that finds none makes triage count every job)."""
        q, private = self.job(t), t["private"].table
        drawn = sample.of(private)
        tasks = sa.table("_private_tasks", sa.column("id"), sa.column("identifier"))
        tasks.schema = private.schema
        own = ("locked_at", "attempts", "max_attempts", "last_error")
        jobs = (
            sa.select(
                *(drawn.c[name].label(q.c(name).name) for name in own),
                tasks.c.identifier.label(q.c("task_identifier").name),
                sa.literal_column("(qb_sample.ctid::text::point)[0]").label("qb_page"),
            )
            .select_from(drawn.join(tasks, tasks.c.id == drawn.c.task_id))
            .subquery("qb_sample_jobs")
        )
        return {**t, "job": q.over(jobs)}, jobs.c.qb_page

    def oldest_pending_index(self, t: Mapping[str, BoundTable]) -> PendingIndex | None:
        """Its ``jobs_main_index``: ``(priority, run_at)`` of the jobs ``is_available`` (no
        worker holds them and they have attempts left: queuebot's waiting and retrying)."""
        private = t["private"].table
        if not {"is_available", "priority", "run_at"} <= set(private.c.keys()):
            return None
        available = private.c.is_available == sa.true()
        return PendingIndex(private, (private.c.priority,), private.c.run_at, available)

    def arguments(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """The job's payload, kept in the private table only: looked up by the job's id."""
        private = t["private"]
        if not private.has("payload"):
            return None
        found = sa.select(private.c("payload")).where(private.c("id") == self.col(t, "id"))
        return found.scalar_subquery()

    def args_lookup(self, tables: Mapping[str, BoundTable]) -> args_like.Lookup | None:
        """As every preset's, over the view joined to the private table once (a lookup by
        arguments reads every job, so not one private row looked up per job)."""
        how = super().args_lookup(tables)
        if how is None:
            return None
        private = tables["private"]
        joined = how.source.join(private.table, private.c("id") == self.col(tables, "id"))
        return replace(how, source=joined, args=private.c("payload"))

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "last_error")

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "updated_at")  # its last failure

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "created_at")

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "run_at")

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "locked_at")

    def _function(self, name: str) -> Any:
        return getattr(getattr(sa.func, self.schema), name)

    async def missing_functions(self, conn: AsyncConnection) -> list[str]:
        missing = []
        for name in FUNCTIONS:
            found = await conn.execute(
                sa.select(sa.func.to_regproc(f"{self.schema}.{name}").is_not(None))
            )
            if not found.scalar_one():
                missing.append(f"{self.schema}.{name}")
        if not missing:
            return []
        return [
            f"requeue, redrive and cancel are off: {', '.join(missing)} is missing (queuebot "
            "changes graphile-worker's jobs only through its own functions, which 0.16 and "
            "later have; run its migrations)"
        ]

    async def write(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        action: Action,
        guard: sa.ColumnElement[bool],
        now: datetime,
    ) -> list[tuple[Any, str]]:
        q = self.job(t)
        rows = (
            await conn.execute(
                sa.select(q.c("id"), q.c("queue_name"), q.c("attempts")).where(guard)
            )
        ).all()
        queues = {int(r[0]): str(r[1]) if r[1] is not None else "" for r in rows}
        changed: list[int] = []
        if action is Action.CANCEL:
            changed = await self._call(conn, "complete_jobs", _ids(list(queues)))
        else:  # one more attempt for each: grouped by the attempts each has
            by_attempts: dict[int, list[int]] = defaultdict(list)
            for job, _, attempts in rows:
                by_attempts[int(attempts)].append(int(job))
            for attempts, group in sorted(by_attempts.items()):
                changed += await self._call(
                    conn,
                    "reschedule_jobs",
                    _ids(group),
                    sa.func.now(),
                    _NO_INT,
                    _NO_INT,
                    sa.literal(attempts + 1, sa.Integer),
                )
        return [(job, queues[job]) for job in changed]

    async def restore(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        guard: sa.ColumnElement[bool],
        values: Mapping[str, Any],
    ) -> bool:
        """Its own function again: the job's earlier attempts, limit and run time."""
        q = self.job(t)
        job = (await conn.execute(sa.select(q.c("id")).where(guard))).scalar_one_or_none()
        if job is None:
            return False
        back = await self._call(
            conn,
            "reschedule_jobs",
            _ids([int(job)]),
            values.get("run_at"),
            _NO_INT,
            values.get("attempts"),
            values.get("max_attempts"),
        )
        return bool(back)

    async def _call(self, conn: AsyncConnection, name: str, *args: Any) -> list[int]:
        """One of its functions returning jobs: the ids of the jobs it changed."""
        jobs = self._function(name)(*args).table_valued("id")
        return [int(r[0]) for r in (await conn.execute(sa.select(jobs.c.id))).all()]

    async def notify(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], changed: Sequence[tuple[Any, str]]
    ) -> None:
        await notify_each(conn, "jobs:insert", [{"count": len(changed)}])


_NO_INT = sa.cast(sa.null(), sa.Integer)


def _ids(ids: list[int]) -> sa.ColumnElement[Any]:
    """Job ids as the one ``bigint[]`` parameter its functions take."""
    return sa.literal(ids, postgresql.ARRAY(sa.BigInteger))
