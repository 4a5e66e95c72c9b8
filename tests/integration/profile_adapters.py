"""What the profile contract tests need from each queue profile, and the adapters of the
two shipped ones (the test-only profile keeps its own in tests/integration/
single_table_profile.py).

An adapter builds known rows in its profile's tables and plays the worker. Everything a
profile does differently (UUID or integer ids, which canonical state its dead rows are
in, how a worker moves a job) is said here, so the contract tests read the same for
every profile.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.estate.message_job import MessageJobProfile
from services.estate.model import CanonicalState
from services.estate.profile import QueueProfile, plain
from services.estate.worker_queue import WorkerQueueProfile

# When the rows an adapter builds happened, relative to ``now`` (every adapter uses these):
# dead i died at dead_at(now, i), so the newest dead row is the last one built.


def dead_at(now: datetime, i: int) -> datetime:
    return now - timedelta(hours=2) + timedelta(minutes=i)


def pending_at(now: datetime, i: int) -> datetime:
    """Pending i was enqueued 10 * (i + 1) minutes ago: the last one is the oldest."""
    return now - timedelta(minutes=10 * (i + 1))


def done_at(now: datetime, i: int) -> datetime:
    return now - timedelta(hours=3) + timedelta(minutes=i)


def stuck_since(now: datetime) -> datetime:
    """Taken by a worker an hour ago and never heard of since (stuck after 15 minutes)."""
    return now - timedelta(hours=1)


@dataclass
class Built:
    """The job ids an adapter built, as a person types them; dead ones oldest first."""

    dead: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)


# Contract clauses a profile may be known not to meet (named in its adapter's departures).
SAYS_CANCELLED = "a redrive of a cancelled job says it was cancelled"
LEAVES_TAKEN_JOBS = "a rollback leaves a job a worker has taken alone"
TAKEN_RUNS = "a redriven job a worker has taken reads as running, not dead"


class ProfileAdapter:
    """What every adapter does (the contract tests see a profile only through one), and
    what a person is shown of its jobs where a system keeps them otherwise than queuebot's
    own profiles do: each such fact of the system its adapter declares (these defaults are
    queuebot's own profiles'), and the contract asserts the fact, exactly."""

    profile_class: ClassVar[type[QueueProfile]]
    dead_state: ClassVar[CanonicalState]  # the canonical state of the dead rows it builds
    # the failure reason of the dead rows it builds (None: the profile keeps none)
    failure_reason: ClassVar[str | None]
    missing_id: ClassVar[str]  # a well-formed id no job has
    postgres_only: ClassVar[bool] = False
    # the system of testkit/systems whose runtime makes its schema (skipped where missing)
    runtime: ClassVar[str | None] = None
    error_text: ClassVar[bool] = True  # a failure's error text is kept
    final_error: ClassVar[bool] = True  # the error of the attempt a job died of is written
    shows_running: ClassVar[bool] = True  # a job a worker holds is seen as running
    keeps_finished: ClassVar[bool] = True  # a finished job stays in the table (add builds them)
    cancels: ClassVar[bool] = True  # cancel is on
    # contract clauses the profile is known not to meet, each with why (see the contract)
    departures: ClassVar[Mapping[str, str]] = {}

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    @classmethod
    def config(cls) -> QueueConfig:
        """The queue's configuration of this profile."""
        raise NotImplementedError

    def shown(self, error: str) -> str | None:
        """The error /queue dlq shows of a job that failed with ``error``."""
        return error if self.error_text else None

    async def insert(
        self, conn: AsyncConnection, kind: str, at: datetime, error: str | None
    ) -> str:
        """One job of ``kind`` (dead, pending, done or stuck) at ``at``: its id."""
        raise NotImplementedError

    async def add(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        dead: int,
        error: str,
        pending: int = 0,
        done: int = 0,
        stuck: int = 0,
    ) -> Built:
        """Rows of every kind: ``dead`` dead-lettered with ``error``, ``pending`` waiting
        to run, ``done`` finished, ``stuck`` taken by a worker long ago."""
        built = Built()
        for i in range(dead):
            built.dead.append(await self.insert(conn, "dead", dead_at(now, i), error))
        for i in range(pending):
            built.pending.append(await self.insert(conn, "pending", pending_at(now, i), None))
        for i in range(done):
            built.done.append(await self.insert(conn, "done", done_at(now, i), None))
        for _ in range(stuck):
            built.stuck.append(await self.insert(conn, "stuck", stuck_since(now), None))
        return built

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        """Jobs a worker would pick up now."""
        raise NotImplementedError

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        """A worker takes these waiting jobs."""
        raise NotImplementedError

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        """A worker finishes these jobs (waiting or taken) successfully."""
        raise NotImplementedError

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        """A worker fails these jobs for good: they are dead letters again, with ``error``."""
        raise NotImplementedError


class WorkerQueueAdapter(ProfileAdapter):
    """dev_r_worker_queue: dead rows are ``failed`` (canonical FAILED); integer ids."""

    profile_class: ClassVar[type[QueueProfile]] = WorkerQueueProfile
    dead_state: ClassVar[CanonicalState] = CanonicalState.FAILED
    failure_reason: ClassVar[str | None] = "timeout"
    missing_id: ClassVar[str] = "987654321"

    @staticmethod
    def config() -> QueueConfig:
        return QueueConfig(profile="worker_queue")

    async def _insert(
        self, conn: AsyncConnection, status: str, queued: datetime, **values: Any
    ) -> str:
        q = (await self.profile.tables(conn))["queue"]
        row = {"job_type": "contract", "status": status, "queued_at": queued, **values}
        done = await conn.execute(q.table.insert().values(row).returning(q.c("id")))
        return str(done.scalar_one())

    async def insert(
        self, conn: AsyncConnection, kind: str, at: datetime, error: str | None
    ) -> str:
        if kind == "dead":
            return await self._insert(
                conn,
                "failed",
                at,
                failure_reason="timeout",
                error_message=error,
                retry_count=3,
                claimed_at=at,
                started_at=at,
            )
        if kind == "pending":
            return await self._insert(conn, "queued", at)
        if kind == "done":
            return await self._insert(conn, "done", at, claimed_at=at, started_at=at)
        return await self._insert(conn, "claimed", at, claimed_at=at, server_node="w-1")

    async def _update(
        self, conn: AsyncConnection, ids: list[str], states: tuple[str, ...], **values: Any
    ) -> None:
        q = (await self.profile.tables(conn))["queue"]
        keys = [self.profile.coerce_id(q.c("id"), i) for i in ids]
        await conn.execute(
            q.table.update().where(q.c("id").in_(keys), q.c("status").in_(states)).values(values)
        )

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        q = (await self.profile.tables(conn))["queue"]
        rows = await conn.execute(sa.select(q.c("id")).where(q.c("status") == "queued"))
        return [str(r[0]) for r in rows.all()]

    async def give_args(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> None:
        """The job was enqueued with these arguments (its payload)."""
        q = (await self.profile.tables(conn))["queue"]
        key = self.profile.coerce_id(q.c("id"), job)
        await conn.execute(q.table.update().where(q.c("id") == key).values(payload=args))

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._update(
            conn, ids, ("queued",), status="claimed", claimed_at=now, server_node="w-1"
        )

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._update(
            conn, ids, ("queued", "claimed", "running"), status="done", started_at=now
        )

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        await self._update(
            conn,
            ids,
            ("queued", "claimed", "running"),
            status="failed",
            failure_reason="other",
            error_message=error,
            retry_count=3,
            claimed_at=now,
            started_at=now,
        )


class MessageJobAdapter(ProfileAdapter):
    """queue_messages + clip_jobs (+ video_assets): a job is dead when its message is in
    the DLQ and the job FAILED (canonical DEAD); UUID ids, one message per job."""

    profile_class: ClassVar[type[QueueProfile]] = MessageJobProfile
    dead_state: ClassVar[CanonicalState] = CanonicalState.DEAD
    failure_reason: ClassVar[str | None] = None
    missing_id: ClassVar[str] = "00000000-0000-4000-8000-000000000000"

    @staticmethod
    def config() -> QueueConfig:
        return QueueConfig(profile="message_job")

    async def give_args(self, conn: AsyncConnection, job: str, args: dict[str, Any]) -> None:
        """The clip job was enqueued with these arguments (its payload)."""
        j = (await self.profile.tables(conn))["jobs"]
        key = self.profile.coerce_id(j.c("id"), job)
        await conn.execute(j.table.update().where(j.c("id") == key).values(payload=args))

    async def _job(
        self,
        conn: AsyncConnection,
        message: str,
        job: str,
        at: datetime,
        *,
        claimed: datetime | None = None,
        attempts: int = 0,
        error: str | None = None,
    ) -> str:
        t = await self.profile.tables(conn)
        m, j, a = t["messages"], t["jobs"], t["assets"]

        def key(table: Any, value: uuid.UUID) -> Any:
            return self.profile.coerce_id(table.c("id"), str(value))

        asset, job_id = key(a, uuid.uuid4()), key(j, uuid.uuid4())
        await conn.execute(
            a.table.insert().values(
                id=asset,
                tenant_id="acme",
                source_object_key=f"uploads/{asset}.mp4",
                status="READY",
                created_at=at,
            )
        )
        finished = at if job in ("SUCCEEDED", "FAILED") else None
        await conn.execute(
            j.table.insert().values(
                id=job_id,
                asset_id=asset,
                tenant_id="acme",
                status=job,
                attempt_count=attempts,
                error_message=error,
                created_at=at,
                started_at=claimed,
                finished_at=finished,
            )
        )
        await conn.execute(
            m.table.insert().values(
                id=key(m, uuid.uuid4()),
                job_id=job_id,
                status=message,
                attempt_count=attempts,
                available_at=at,
                claimed_at=claimed,
                last_error=error,
            )
        )
        return str(plain(job_id))

    async def insert(
        self, conn: AsyncConnection, kind: str, at: datetime, error: str | None
    ) -> str:
        if kind == "dead":
            early = at - timedelta(minutes=5)
            return await self._job(
                conn, "DLQ", "FAILED", early, claimed=at, attempts=3, error=error
            )
        if kind == "pending":
            return await self._job(conn, "PENDING", "QUEUED", at)
        if kind == "done":
            return await self._job(conn, "COMPLETED", "SUCCEEDED", at, claimed=at, attempts=1)
        return await self._job(conn, "PROCESSING", "RUNNING", at, claimed=at, attempts=1)

    async def _move(
        self,
        conn: AsyncConnection,
        ids: list[str],
        *,
        messages: tuple[tuple[str, ...], dict[str, Any]],
        jobs: tuple[tuple[str, ...], dict[str, Any]],
    ) -> None:
        """Move the jobs' messages in the first states and the jobs in the second."""
        t = await self.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        keys = [self.profile.coerce_id(j.c("id"), i) for i in ids]
        (m_from, m_values), (j_from, j_values) = messages, jobs
        await conn.execute(
            m.table.update()
            .where(m.c("job_id").in_(keys), m.c("status").in_(m_from))
            .values(m_values)
        )
        await conn.execute(
            j.table.update().where(j.c("id").in_(keys), j.c("status").in_(j_from)).values(j_values)
        )

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        m = (await self.profile.tables(conn))["messages"]
        rows = await conn.execute(
            sa.select(m.c("job_id")).where(m.c("status") == "PENDING").distinct()
        )
        return [str(plain(r[0])) for r in rows.all()]

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._move(
            conn,
            ids,
            messages=(("PENDING",), {"status": "PROCESSING", "claimed_at": now}),
            jobs=(("QUEUED",), {"status": "RUNNING", "started_at": now}),
        )

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        await self._move(
            conn,
            ids,
            messages=(("PENDING", "PROCESSING"), {"status": "COMPLETED", "claimed_at": now}),
            jobs=(
                ("QUEUED", "RUNNING"),
                {"status": "SUCCEEDED", "progress_percent": 100, "finished_at": now},
            ),
        )

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        await self._move(
            conn,
            ids,
            messages=(
                ("PENDING", "PROCESSING"),
                {"status": "DLQ", "attempt_count": 3, "claimed_at": now, "last_error": error},
            ),
            jobs=(
                ("QUEUED", "RUNNING"),
                {"status": "FAILED", "error_message": error, "finished_at": now},
            ),
        )
