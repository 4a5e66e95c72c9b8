"""The profile contract's adapters for the presets: each builds its system's jobs table and
plays its system's worker, as profile_adapters.py does for queuebot's own profiles.

River, Oban and pg-boss get their tables from DDL written from the systems' own migrations
(the parts queuebot reads and the constraints that hold a change to the system's rules:
River's finalized_at CHECK, Oban's attempt range); Procrastinate gets its own schema, from
the installed package. The real systems, with their own workers, are in tests/presets/.
All are PostgreSQL only (enum states, jsonb, arrays).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.estate.good_job import GoodJobProfile
from services.estate.graphile_worker import GraphileWorkerProfile
from services.estate.model import CanonicalState
from services.estate.oban import ObanProfile
from services.estate.pg_boss import PgBossProfile
from services.estate.procrastinate import ProcrastinateProfile
from services.estate.profile import QueueProfile, plain
from services.estate.que import QueProfile
from services.estate.river import RiverProfile
from services.estate.solid_queue import SolidQueueProfile
from testkit.systems.good_job import DDL as GOOD_JOB_DDL
from testkit.systems.que import DDL as QUE_DDL
from testkit.systems.solid_queue import DDL as SOLID_QUEUE_DDL
from tests.integration.profile_adapters import (
    LEAVES_TAKEN_JOBS,
    SAYS_CANCELLED,
    Built,
    ProfileAdapter,
    dead_at,
    done_at,
    pending_at,
    stuck_since,
)

RIVER_DDL = """
CREATE TYPE river_job_state AS ENUM ('available', 'cancelled', 'completed', 'discarded',
  'pending', 'retryable', 'running', 'scheduled');
CREATE TABLE river_job (
  id bigserial PRIMARY KEY,
  args jsonb NOT NULL DEFAULT '{}',
  attempt smallint NOT NULL DEFAULT 0,
  attempted_at timestamptz,
  attempted_by text[],
  created_at timestamptz NOT NULL DEFAULT now(),
  errors jsonb[],
  finalized_at timestamptz,
  kind text NOT NULL,
  max_attempts smallint NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}',
  priority smallint NOT NULL DEFAULT 1,
  queue text NOT NULL DEFAULT 'default',
  state river_job_state NOT NULL DEFAULT 'available',
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  tags varchar(255)[] NOT NULL DEFAULT '{}',
  CONSTRAINT finalized_or_finalized_at_null CHECK (
    (finalized_at IS NULL AND state NOT IN ('cancelled', 'completed', 'discarded'))
    OR (finalized_at IS NOT NULL AND state IN ('cancelled', 'completed', 'discarded'))),
  CONSTRAINT max_attempts_is_positive CHECK (max_attempts > 0),
  CONSTRAINT priority_in_range CHECK (priority >= 1 AND priority <= 4)
);
CREATE INDEX river_job_prioritized_fetching_index
  ON river_job (state, queue, priority, scheduled_at, id);
"""

OBAN_DDL = """
CREATE TYPE oban_job_state AS ENUM ('available', 'scheduled', 'executing', 'retryable',
  'completed', 'discarded', 'cancelled', 'suspended');
CREATE TABLE oban_jobs (
  id bigserial PRIMARY KEY,
  state oban_job_state NOT NULL DEFAULT 'available',
  queue text NOT NULL DEFAULT 'default',
  worker text NOT NULL,
  args jsonb NOT NULL DEFAULT '{}',
  errors jsonb[] NOT NULL DEFAULT ARRAY[]::jsonb[],
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 20,
  inserted_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
  scheduled_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
  attempted_at timestamp,
  completed_at timestamp,
  attempted_by text[],
  discarded_at timestamp,
  priority integer NOT NULL DEFAULT 0,
  tags text[] DEFAULT ARRAY[]::text[],
  meta jsonb DEFAULT '{}',
  cancelled_at timestamp,
  CONSTRAINT attempt_range CHECK (attempt >= 0 AND attempt <= max_attempts),
  CONSTRAINT positive_max_attempts CHECK (max_attempts > 0)
);
CREATE INDEX oban_jobs_state_queue_priority_scheduled_at_id_index
  ON oban_jobs (state, queue, priority, scheduled_at, id);
"""

PGBOSS_DDL = """
CREATE SCHEMA pgboss;
CREATE TYPE pgboss.job_state AS ENUM ('created', 'retry', 'active', 'completed',
  'cancelled', 'failed');
CREATE TABLE pgboss.job (
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  name text NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  data jsonb,
  state pgboss.job_state NOT NULL DEFAULT 'created',
  retry_limit integer NOT NULL DEFAULT 2,
  retry_count integer NOT NULL DEFAULT 0,
  retry_delay integer NOT NULL DEFAULT 0,
  retry_backoff boolean NOT NULL DEFAULT false,
  start_after timestamptz NOT NULL DEFAULT now(),
  started_on timestamptz,
  created_on timestamptz NOT NULL DEFAULT now(),
  completed_on timestamptz,
  keep_until timestamptz NOT NULL DEFAULT now() + interval '14 days',
  output jsonb,
  PRIMARY KEY (name, id)
) PARTITION BY LIST (name);
CREATE TABLE pgboss.j_contract PARTITION OF pgboss.job FOR VALUES IN ('contract');
"""


class PresetAdapter(ProfileAdapter):
    """What the presets' adapters share: PostgreSQL only, inserts and moves by column."""

    profile_class: ClassVar[type[QueueProfile]]
    postgres_only: ClassVar[bool] = True
    dead_state: ClassVar[CanonicalState] = CanonicalState.DEAD
    failure_reason: ClassVar[str | None] = None
    missing_id: ClassVar[str] = "987654321"
    ddl: ClassVar[str]
    # the system's own words: its waiting, running, succeeded and dead states
    waiting_state: ClassVar[str] = "available"
    running_state: ClassVar[str] = "running"
    done_state: ClassVar[str] = "completed"
    dead_value: ClassVar[str] = "discarded"

    @classmethod
    def config(cls) -> QueueConfig:
        return QueueConfig(preset=cls.profile_class.name)

    @classmethod
    async def create(cls, conn: AsyncConnection) -> None:
        raw = await conn.get_raw_connection()  # DDL text as written: no placeholders parsed
        await raw.driver_connection.execute(cls.ddl)  # type: ignore[union-attr]

    async def _table(self, conn: AsyncConnection) -> Any:
        return (await self.profile.tables(conn))["job"]

    async def _insert(self, conn: AsyncConnection, **values: Any) -> str:
        q = await self._table(conn)
        done = await conn.execute(q.table.insert().values(values).returning(q.c("id")))
        return str(plain(done.scalar_one()))

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        raise NotImplementedError

    async def insert(
        self, conn: AsyncConnection, kind: str, at: datetime, error: str | None
    ) -> str:
        return await self._insert(conn, **self.row(kind, at, error))

    async def _move(
        self, conn: AsyncConnection, ids: list[str], states: tuple[str, ...], values: dict[str, Any]
    ) -> None:
        q = await self._table(conn)
        keys = [self.profile.coerce_id(q.c("id"), i) for i in ids]
        state = q.c(self.profile.status_column)
        await conn.execute(
            q.table.update().where(q.c("id").in_(keys), state.in_(states)).values(values)
        )

    async def prune(self, conn: AsyncConnection, job: str) -> None:
        """The system's pruner deletes a job."""
        q = await self._table(conn)
        await conn.execute(
            q.table.delete().where(q.c("id") == self.profile.coerce_id(q.c("id"), job))
        )

    async def give_args(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> None:
        """The job was enqueued with these arguments, kept as its system keeps them."""
        q = await self._table(conn)
        column = q.c(self.profile.cols.args).name  # type: ignore[attr-defined]
        key = self.profile.coerce_id(q.c("id"), job)
        value = await self.args_value(conn, job, args)
        await conn.execute(q.table.update().where(q.c("id") == key).values({column: value}))

    async def args_value(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> Any:
        return args

    async def move(self, conn: AsyncConnection, ids: list[str], queue: str) -> None:
        """These jobs belong to another queue of the system's table."""
        q = await self._table(conn)
        keys = [self.profile.coerce_id(q.c("id"), i) for i in ids]
        column = q.c(self.profile.cols.queue).name  # type: ignore[attr-defined]
        await conn.execute(q.table.update().where(q.c("id").in_(keys)).values({column: queue}))

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        q = await self._table(conn)
        state = q.c(self.profile.status_column)
        rows = await conn.execute(sa.select(q.c("id")).where(state == self.waiting_state))
        return [str(plain(r[0])) for r in rows.all()]

    def claimed(self, now: datetime) -> dict[str, Any]:
        raise NotImplementedError

    def completed(self, now: datetime) -> dict[str, Any]:
        raise NotImplementedError

    def failed(self, now: datetime, error: str) -> dict[str, Any]:
        raise NotImplementedError

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._move(conn, ids, (self.waiting_state,), self.claimed(now))

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        states = (self.waiting_state, self.running_state)
        await self._move(conn, ids, states, self.completed(now))

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        states = (self.waiting_state, self.running_state)
        await self._move(conn, ids, states, self.failed(now, error))


def _errors_append(column: sa.Column[Any], attempt: Any, at: datetime, error: str) -> Any:
    """``errors || {attempt, at, error}`` (River's and Oban's history of failed attempts)."""
    entry = sa.func.jsonb_build_object("attempt", attempt, "at", at.isoformat(), "error", error)
    return sa.func.array_append(sa.func.coalesce(column, sa.text("ARRAY[]::jsonb[]")), entry)


class RiverAdapter(PresetAdapter):
    """river_job: dead jobs are ``discarded``; a worker's pick-up counts an attempt."""

    profile_class = RiverProfile
    ddl = RIVER_DDL

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        base: dict[str, Any] = {"kind": "contract", "max_attempts": 3}
        if kind == "dead":
            entry = {"at": at.isoformat(), "attempt": 3, "error": error}
            return base | {
                "state": "discarded",
                "attempt": 3,
                "errors": [entry],
                "created_at": at - timedelta(minutes=5),
                "scheduled_at": at - timedelta(minutes=5),
                "attempted_at": at - timedelta(minutes=1),
                "finalized_at": at,
            }
        if kind == "pending":
            return base | {"state": "available", "created_at": at, "scheduled_at": at}
        if kind == "done":
            return base | {"state": "completed", "attempt": 1, "created_at": at, "finalized_at": at}
        return base | {"state": "running", "attempt": 1, "attempted_at": at, "created_at": at}

    def claimed(self, now: datetime) -> dict[str, Any]:
        q = self.profile.reflected["job"]  # type: ignore[index]
        return {"state": "running", "attempt": q.c("attempt") + 1, "attempted_at": now}

    def completed(self, now: datetime) -> dict[str, Any]:
        return {"state": "completed", "finalized_at": now}

    def failed(self, now: datetime, error: str) -> dict[str, Any]:
        q = self.profile.reflected["job"]  # type: ignore[index]
        errors = _errors_append(q.c("errors"), q.c("attempt"), now, error)
        return {"state": "discarded", "finalized_at": now, "errors": errors}


def _naive(at: datetime) -> datetime:
    """Oban keeps its times without a zone, in UTC."""
    return at.astimezone(UTC).replace(tzinfo=None)


class ObanAdapter(PresetAdapter):
    """oban_jobs: dead jobs are ``discarded`` with ``discarded_at``; times in UTC."""

    profile_class = ObanProfile
    ddl = OBAN_DDL
    running_state = "executing"

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        base: dict[str, Any] = {"worker": "Contract.Worker", "max_attempts": 3}
        t = _naive(at)
        if kind == "dead":
            entry = {"at": at.isoformat(), "attempt": 3, "error": error}
            return base | {
                "state": "discarded",
                "attempt": 3,
                "errors": [entry],
                "inserted_at": t - timedelta(minutes=5),
                "scheduled_at": t - timedelta(minutes=5),
                "attempted_at": t - timedelta(minutes=1),
                "discarded_at": t,
            }
        if kind == "pending":
            return base | {"state": "available", "inserted_at": t, "scheduled_at": t}
        if kind == "done":
            return base | {"state": "completed", "attempt": 1, "inserted_at": t, "completed_at": t}
        return base | {"state": "executing", "attempt": 1, "attempted_at": t, "inserted_at": t}

    def claimed(self, now: datetime) -> dict[str, Any]:
        q = self.profile.reflected["job"]  # type: ignore[index]
        return {"state": "executing", "attempt": q.c("attempt") + 1, "attempted_at": _naive(now)}

    def completed(self, now: datetime) -> dict[str, Any]:
        return {"state": "completed", "completed_at": _naive(now)}

    def failed(self, now: datetime, error: str) -> dict[str, Any]:
        q = self.profile.reflected["job"]  # type: ignore[index]
        errors = _errors_append(q.c("errors"), q.c("attempt"), now, error)
        return {"state": "discarded", "discarded_at": _naive(now), "errors": errors}


class PgBossAdapter(PresetAdapter):
    """pgboss.job (one partition per queue): dead jobs are ``failed``; uuid ids; its fetch
    of a job in ``retry`` counts the attempt."""

    profile_class = PgBossProfile
    ddl = PGBOSS_DDL
    missing_id = "00000000-0000-4000-8000-000000000000"
    waiting_state = "created"
    running_state = "active"
    dead_value = "failed"

    async def move(self, conn: AsyncConnection, ids: list[str], queue: str) -> None:
        await conn.exec_driver_sql(  # pg-boss makes a partition per queue
            f"CREATE TABLE pgboss.j_{queue} PARTITION OF pgboss.job FOR VALUES IN ('{queue}')"
        )
        await super().move(conn, ids, queue)

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        q = await self._table(conn)
        rows = await conn.execute(
            sa.select(q.c("id")).where(q.c("state").in_(("created", "retry")))
        )
        return sorted(str(plain(r[0])) for r in rows.all())

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        base: dict[str, Any] = {"name": "contract", "retry_limit": 2}
        if kind == "dead":
            return base | {
                "state": "failed",
                "retry_count": 2,
                "output": {"message": error},
                "created_on": at - timedelta(minutes=5),
                "start_after": at - timedelta(minutes=5),
                "started_on": at - timedelta(minutes=1),
                "completed_on": at,
            }
        if kind == "pending":
            return base | {"state": "created", "created_on": at, "start_after": at}
        if kind == "done":
            return base | {"state": "completed", "created_on": at, "completed_on": at}
        return base | {"state": "active", "started_on": at, "created_on": at}

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        q = await self._table(conn)
        count = sa.case((q.c("state") == "retry", q.c("retry_count") + 1), else_=q.c("retry_count"))
        await self._move(
            conn,
            ids,
            ("created", "retry"),
            {"state": "active", "started_on": now, "retry_count": count},
        )

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._move(
            conn, ids, ("created", "retry", "active"), {"state": "completed", "completed_on": now}
        )

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        values = {"state": "failed", "completed_on": now, "output": {"message": error}}
        await self._move(conn, ids, ("created", "retry", "active"), values)


class ProcrastinateAdapter(PresetAdapter):
    """Procrastinate's own schema: dead jobs are ``failed``; no error text is kept; a job's
    times are its events (written here where its triggers would have written them)."""

    profile_class = ProcrastinateProfile
    runtime = "procrastinate"  # its schema comes from the installed package
    error_text = False
    waiting_state = "todo"
    running_state = "doing"
    dead_value = "failed"

    @classmethod
    async def create(cls, conn: AsyncConnection) -> None:
        from procrastinate.schema import SchemaManager  # the system's own schema

        raw = await conn.get_raw_connection()  # its SQL holds '%': no placeholders parsed
        await raw.driver_connection.execute(SchemaManager.get_schema())  # type: ignore[union-attr]

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        base: dict[str, Any] = {"queue_name": "default", "task_name": "contract.task"}
        status = {"dead": "failed", "pending": "todo", "done": "succeeded", "stuck": "doing"}
        attempts = {"dead": 2, "pending": 0, "done": 0, "stuck": 0}
        return base | {"status": status[kind], "attempts": attempts[kind]}

    async def add(self, conn: AsyncConnection, **kw: Any) -> Built:
        built = await super().add(conn, **kw)
        now: datetime = kw["now"]
        events: list[tuple[str, str, datetime]] = []
        for i, job in enumerate(built.dead):
            at = dead_at(now, i)
            events += [(job, "deferred", at - timedelta(minutes=5)), (job, "failed", at)]
        for i, job in enumerate(built.pending):
            events.append((job, "deferred", pending_at(now, i)))
        for i, job in enumerate(built.done):
            events += [(job, "deferred", done_at(now, i)), (job, "succeeded", done_at(now, i))]
        for job in built.stuck:
            events += [(job, "deferred", stuck_since(now)), (job, "started", stuck_since(now))]
        e = (await self.profile.tables(conn))["events"]
        await conn.execute(
            e.table.insert(),
            [{"job_id": int(job), "type": kind, "at": at} for job, kind, at in events],
        )
        # the insert trigger wrote a 'deferred' event for each todo job, at the real now:
        # keep the one written here, as the job's enqueue
        await conn.execute(
            e.table.delete().where(
                e.c("type") == "deferred",
                e.c("at") > now,
                e.c("job_id").in_([int(j) for j in built.pending]),
            )
        )
        return built

    def claimed(self, now: datetime) -> dict[str, Any]:
        return {"status": "doing"}

    def completed(self, now: datetime) -> dict[str, Any]:
        return {"status": "succeeded"}

    def failed(self, now: datetime, error: str) -> dict[str, Any]:
        return {"status": "failed"}

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        """Failed, with the 'failed' event its trigger writes, at the test's now (the
        trigger's own is at the real now, which the test's clock is not)."""
        await super().fail(conn, ids, now=now, error=error)
        e = (await self.profile.tables(conn))["events"]
        await conn.execute(
            e.table.insert(), [{"job_id": int(job), "type": "failed", "at": now} for job in ids]
        )


# Why a system whose cancel deletes the job departs from the contract's clause.
CANCEL_DELETES = (
    "its cancel deletes the job (the system's own way to drop one): a later redrive of it "
    "is refused as 'not found', not as cancelled"
)


class QueAdapter(PresetAdapter):
    """que_jobs: dead jobs have ``expired_at``; a job that succeeds is deleted; a worker's
    hold on a job is an advisory lock, invisible in the table (so no job is ever seen
    running: ``add`` makes no stuck ones)."""

    profile_class = QueProfile
    ddl = QUE_DDL  # as testkit/systems/que.py writes Que's schema
    shows_running = False
    final_error = False  # Que's expiry writes no error: the attempt before it's is shown
    dead_value = "expired"
    departures = {
        SAYS_CANCELLED: CANCEL_DELETES,
        LEAVES_TAKEN_JOBS: (
            "a Que worker holds a job by an advisory lock, not in que_jobs: a rollback "
            "cannot tell a job a worker has taken from one still waiting, and returns it "
            "to dead (config check says so)"
        ),
    }

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        q = await self._table(conn)
        rows = await conn.execute(
            sa.select(q.c("id")).where(q.c("expired_at").is_(None), q.c("finished_at").is_(None))
        )
        return [str(plain(r[0])) for r in rows.all()]

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        base: dict[str, Any] = {"job_class": "Contract::Job", "run_at": at}
        if kind == "dead":
            return base | {"error_count": 3, "last_error_message": error, "expired_at": at}
        if kind == "done":
            return base | {"finished_at": at}
        return base

    async def add(self, conn: AsyncConnection, **kw: Any) -> Built:
        return await super().add(conn, **kw | {"stuck": 0})

    async def args_value(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> Any:
        return [args]  # Que's args are an array (its CHECK)

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        return None  # an advisory lock: nothing in the table changes

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        q = await self._table(conn)
        await conn.execute(q.table.delete().where(q.c("id").in_([int(i) for i in ids])))

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        q = await self._table(conn)
        await conn.execute(
            q.table.update()
            .where(q.c("id").in_([int(i) for i in ids]))
            .values(error_count=q.c("error_count") + 1, expired_at=now)
        )


class GoodJobAdapter(PresetAdapter):
    """good_jobs (its schema as testkit/systems/good_job.py writes it): dead jobs finished with
    an error; times without a zone, in UTC; uuid ids."""

    profile_class = GoodJobProfile
    ddl = GOOD_JOB_DDL
    missing_id = "00000000-0000-4000-8000-000000000000"
    dead_value = "discarded"
    cancels = False

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        t = _naive(at)
        base: dict[str, Any] = {
            "job_class": "ContractJob",
            "queue_name": "default",
            "active_job_id": sa.func.gen_random_uuid(),
            "created_at": t,
            "updated_at": t,
            "scheduled_at": t,
            "executions_count": 0,
        }
        if kind == "dead":
            early = t - timedelta(minutes=5)
            return base | {
                "created_at": early,
                "scheduled_at": early,
                "performed_at": t - timedelta(minutes=1),
                "finished_at": t,
                "error": error,
                "error_event": 4,
                "executions_count": 2,
            }
        if kind == "done":
            return base | {"performed_at": t, "finished_at": t, "executions_count": 1}
        if kind == "stuck":
            return base | {"performed_at": t, "executions_count": 1}
        return base

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        q = await self._table(conn)
        rows = await conn.execute(
            sa.select(q.c("id")).where(q.c("finished_at").is_(None), q.c("performed_at").is_(None))
        )
        return sorted(str(plain(r[0])) for r in rows.all())

    async def _set(self, conn: AsyncConnection, ids: list[str], **values: Any) -> None:
        q = await self._table(conn)
        keys = [self.profile.coerce_id(q.c("id"), i) for i in ids]
        await conn.execute(
            q.table.update().where(q.c("id").in_(keys), q.c("finished_at").is_(None)).values(values)
        )

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        q = await self._table(conn)
        await self._set(
            conn, ids, performed_at=_naive(now), executions_count=q.c("executions_count") + 1
        )

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._set(conn, ids, finished_at=_naive(now), error=None, error_event=None)

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        await self._set(conn, ids, finished_at=_naive(now), error=error, error_event=4)


SOLID_ERROR_CLASS = "Timeout::Error"


def _solid_error(error: str) -> str:
    return json.dumps({"exception_class": SOLID_ERROR_CLASS, "message": error, "backtrace": []})


class SolidQueueAdapter(PresetAdapter):
    """Solid Queue (its schema as testkit/systems/solid_queue.py writes it): a job's state is
    the execution table holding it; dead jobs have a failed execution."""

    profile_class = SolidQueueProfile
    ddl = SOLID_QUEUE_DDL
    dead_value = "failed"
    waiting_state = "ready"
    departures = {SAYS_CANCELLED: CANCEL_DELETES}

    def shown(self, error: str) -> str | None:
        """Its error is the exception's class and message: both are shown."""
        return f"{SOLID_ERROR_CLASS}: {error}"

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        t = _naive(at)
        runs = {"dead": 2, "done": 1, "stuck": 1, "pending": 0}[kind]
        base: dict[str, Any] = {
            "queue_name": "default",
            "class_name": "ContractJob",
            "arguments": json.dumps({"executions": runs}),
            "created_at": t,
            "updated_at": t,
        }
        return base | ({"finished_at": t} if kind == "done" else {})

    async def add(self, conn: AsyncConnection, **kw: Any) -> Built:
        built = await super().add(conn, **kw)
        t = await self.profile.tables(conn)
        now: datetime = kw["now"]
        for i, job in enumerate(built.dead):
            at = _naive(dead_at(now, i))
            await self._execution(conn, t["failed"], job, error=_solid_error(kw["error"]), at=at)
        for i, job in enumerate(built.pending):
            await self._ready(conn, t, job, _naive(pending_at(now, i)))
        for job in built.stuck:
            await self._execution(
                conn, t["claimed"], job, at=_naive(stuck_since(now)), process_id=None
            )
        return built

    @staticmethod
    async def _execution(
        conn: AsyncConnection, table: Any, job: str, *, at: datetime, **values: Any
    ) -> None:
        present = {k: v for k, v in values.items() if table.table.c.get(k) is not None}
        await conn.execute(table.table.insert().values(job_id=int(job), created_at=at, **present))

    async def _ready(self, conn: AsyncConnection, t: Any, job: str, at: datetime) -> None:
        await self._execution(conn, t["ready"], job, at=at, queue_name="default", priority=0)

    async def args_value(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> Any:
        """Active Job's serialized job (text), its count of runs kept."""
        q = await self._table(conn)
        kept = (
            await conn.execute(sa.select(q.c("arguments")).where(q.c("id") == int(job)))
        ).scalar_one()
        return json.dumps(json.loads(kept) | {"arguments": [args]})

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        ready = (await self.profile.tables(conn))["ready"]
        rows = await conn.execute(sa.select(ready.c("job_id")))
        return sorted(str(r[0]) for r in rows.all())

    async def _release(self, conn: AsyncConnection, ids: list[str]) -> None:
        t = await self.profile.tables(conn)
        for role in ("ready", "claimed"):
            await conn.execute(
                t[role].table.delete().where(t[role].c("job_id").in_([int(i) for i in ids]))
            )

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        t = await self.profile.tables(conn)
        await self._release(conn, ids)
        for job in ids:
            await self._execution(conn, t["claimed"], job, at=_naive(now), process_id=None)

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        q = await self._table(conn)
        await self._release(conn, ids)
        await conn.execute(
            q.table.update()
            .where(q.c("id").in_([int(i) for i in ids]))
            .values(finished_at=_naive(now))
        )

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        t = await self.profile.tables(conn)
        await self._release(conn, ids)
        for job in ids:
            await self._execution(conn, t["failed"], job, error=_solid_error(error), at=_naive(now))


PRIVATE = "graphile_worker._private_jobs"


class GraphileWorkerAdapter(PresetAdapter):
    """graphile-worker 0.17's own schema (its migrations, run by its own package): jobs added
    by its add_job, played on its private table as its worker does; a job that succeeds is
    deleted, so ``add`` keeps no finished ones."""

    profile_class = GraphileWorkerProfile
    runtime = "graphile-worker"  # its schema is its own migrations, run by its package
    keeps_finished = False  # a job that succeeds is deleted
    dead_value = "dead"
    departures = {SAYS_CANCELLED: CANCEL_DELETES}

    @classmethod
    async def create(cls, conn: AsyncConnection) -> None:
        from testkit.systems.graphile_system import GraphileWorker
        from tests.conftest import _pg_conninfo

        url = _pg_conninfo(conn.engine.url.render_as_string(hide_password=False))
        await asyncio.to_thread(
            GraphileWorker()._node, "build", {"url": url, "queues": {}}, fault=False, timeout=60
        )

    async def _insert(self, conn: AsyncConnection, **values: Any) -> str:
        """A job added by its own add_job, then given ``values`` on its private table."""
        job = (
            await conn.execute(
                sa.text(
                    "SELECT (graphile_worker.add_job('contract', '{}'::json, "
                    "queue_name => 'default', max_attempts => 3)).id"
                )
            )
        ).scalar_one()
        await self._set(conn, [str(job)], **values)
        return str(job)

    async def _set(self, conn: AsyncConnection, ids: list[str], **values: Any) -> None:
        sets = ", ".join(f"{k} = :{k}" for k in values)
        if sets:
            await conn.execute(
                sa.text(f"UPDATE {PRIVATE} SET {sets} WHERE id = ANY(CAST(:ids AS bigint[]))"),
                {**values, "ids": [int(i) for i in ids]},
            )

    async def give_args(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> None:
        await conn.execute(
            sa.text(f"UPDATE {PRIVATE} SET payload = CAST(:args AS json) WHERE id = :id"),
            {"args": json.dumps(args), "id": int(job)},
        )

    def row(self, kind: str, at: datetime, error: str | None) -> dict[str, Any]:
        if kind == "dead":
            early = at - timedelta(minutes=5)
            return {
                "attempts": 3,
                "last_error": error,
                "created_at": early,
                "run_at": at,
                "updated_at": at,
            }
        if kind == "stuck":
            return {"attempts": 1, "locked_at": at, "locked_by": "w-1"}
        return {"created_at": at, "run_at": at, "updated_at": at}

    async def add(self, conn: AsyncConnection, **kw: Any) -> Built:
        return await super().add(conn, **kw | {"done": 0})  # a success is deleted

    async def prune(self, conn: AsyncConnection, job: str) -> None:
        await self.complete(conn, [job], now=datetime.now(UTC))

    async def move(self, conn: AsyncConnection, ids: list[str], queue: str) -> None:
        await conn.execute(
            sa.text(
                "INSERT INTO graphile_worker._private_job_queues (queue_name) VALUES (:q) "
                "ON CONFLICT DO NOTHING"
            ),
            {"q": queue},
        )
        await conn.execute(
            sa.text(
                f"UPDATE {PRIVATE} SET job_queue_id = (SELECT id FROM "
                "graphile_worker._private_job_queues WHERE queue_name = :q) "
                "WHERE id = ANY(CAST(:ids AS bigint[]))"
            ),
            {"q": queue, "ids": [int(i) for i in ids]},
        )

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        rows = await conn.execute(
            sa.text(f"SELECT id FROM {PRIVATE} WHERE locked_at IS NULL AND attempts < max_attempts")
        )
        return sorted(str(r[0]) for r in rows.all())

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        """As its worker takes a job: one more attempt, locked at the database's now (its
        functions take a job locked more than 4 hours before that as a dead worker's)."""
        await conn.execute(
            sa.text(
                f"UPDATE {PRIVATE} SET locked_at = now(), locked_by = 'w-1', "
                "attempts = attempts + 1 WHERE id = ANY(CAST(:ids AS bigint[]))"
            ),
            {"ids": [int(i) for i in ids]},
        )

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await conn.execute(
            sa.text(f"DELETE FROM {PRIVATE} WHERE id = ANY(CAST(:ids AS bigint[]))"),
            {"ids": [int(i) for i in ids]},
        )

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        await conn.execute(
            sa.text(
                f"UPDATE {PRIVATE} SET attempts = max_attempts, last_error = :error, "
                "locked_at = NULL, locked_by = NULL, updated_at = :now "
                "WHERE id = ANY(CAST(:ids AS bigint[]))"
            ),
            {"error": error, "now": now, "ids": [int(i) for i in ids]},
        )


# Every preset's adapter: the tests over all the presets run on each.
PRESET_ADAPTERS: list[type[PresetAdapter]] = [
    RiverAdapter,
    ObanAdapter,
    PgBossAdapter,
    ProcrastinateAdapter,
    QueAdapter,
    GoodJobAdapter,
    SolidQueueAdapter,
    GraphileWorkerAdapter,
]
