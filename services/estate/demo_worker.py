"""A simulated worker for ``queuebot demo``, so a newcomer can watch a staged redrive go
sample -> waves -> done, and see a plan halt on a job that dead-letters again.

It takes the jobs queuebot put back in the demo's queues (redriven or requeued) once they
have waited ``delay``, and after another ``delay`` finishes them: most succeed, and the
ones the demo's story says are still broken fail again with their original error.

- message_job (``clips``): PENDING messages of jobs with a ``REDRIVE_REQUESTED`` event are
  claimed (PROCESSING, job RUNNING) and then COMPLETED / SUCCEEDED, or, for a job whose
  last ``FAILED`` event says "upstream timeout" (the transcoder is still down), DLQ /
  FAILED again with that error and the ``FAILED`` and ``DLQ`` events the estate writes.
- worker_queue (``workers``): queued rows queuebot requeued or redrove go running, then
  done, or, for job type ``continue-issue`` (its allowlist was never fixed), failed again
  with ``implementation_error`` and the original "Invalid job_type" error. The table keeps
  no record of who requeued a row, so queuebot's own records (its redrive log and its
  executed requeues) name them.

The demo's own backlog (its pending, stuck and duplicate rows) is left as it was built, so
``/queue triage`` keeps showing it. Which jobs fail is fixed, so a run can be repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.estate import Estate
from services.estate.message_job.events import REDRIVE_EVENT, insert_events
from services.estate.profile import QueueProfile, plain
from services.estate.tables import BoundTable
from services.models import ChangeRequest, RedriveLog

log = logging.getLogger("queuebot.demo.worker")

DELAY = 2.0  # seconds a job waits to be claimed, and then to finish
FAILS_AGAIN = re.compile(r"upstream timeout", re.IGNORECASE)  # clips: the original error
BROKEN_JOB_TYPE = "continue-issue"  # workers: still not an allowed job type
_requests = cast(sa.Table, ChangeRequest.__table__)
_redrives = cast(sa.Table, RedriveLog.__table__)


@dataclass
class Pass:
    """What one pass of the worker did."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def idle(self) -> bool:
        return not (self.claimed or self.succeeded or self.failed)


class DemoWorker:
    def __init__(
        self,
        estate: Estate,
        *,
        delay: float = DELAY,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.estate = estate
        self.delay = delay
        self.timer = timer
        self._seen: dict[tuple[str, str, str], float] = {}  # (queue, row, state) -> first seen

    def _due(self, queue: str, row: str, state: str) -> bool:
        """Whether ``row`` has been in ``state`` for ``delay`` (first sight starts it)."""
        first = self._seen.setdefault((queue, row, state), self.timer())
        return self.timer() - first >= self.delay

    async def step(self) -> Pass:
        """One pass over every demo queue, in one transaction per queue."""
        done = Pass()
        for queue, profile in self.estate.profiles.items():
            async with self.estate.engine.begin() as conn:
                if profile.name == "message_job":
                    await self._clips(conn, queue, profile, done)
                elif profile.name == "worker_queue":
                    await self._workers(conn, queue, profile, done)
        return done

    async def run_forever(self, stop: asyncio.Event, interval: float = 0.5) -> None:
        while not stop.is_set():
            try:
                done = await self.step()
                if not done.idle:
                    log.info("demo worker: %s", done)
            except Exception:  # a demo helper: never take the console down
                log.exception("demo worker pass failed; trying again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)

    # -- message_job ---------------------------------------------------------------------

    async def _clips(
        self, conn: AsyncConnection, queue: str, profile: QueueProfile, done: Pass
    ) -> None:
        t = await profile.tables(conn)
        m, j, e = t["messages"], t["jobs"], t["events"]
        now = self.estate.clock()
        redriven = (
            sa.select(e.c("aggregate_id"))
            .where(e.c("event_type") == REDRIVE_EVENT)
            .scalar_subquery()
        )
        rows = await conn.execute(
            sa.select(m.c("id"), m.c("job_id"), m.c("status")).where(
                m.c("status").in_(("PENDING", "PROCESSING")), m.c("job_id").in_(redriven)
            )
        )
        for message, job, status in rows.all():
            if not self._due(queue, str(plain(message)), str(status)):
                continue
            if status == "PENDING":
                await conn.execute(
                    m.table.update()
                    .where(m.c("id") == message, m.c("status") == "PENDING")
                    .values(
                        {
                            m.c("status").name: "PROCESSING",
                            m.c("claimed_at").name: now,
                            m.c("attempt_count").name: m.c("attempt_count") + 1,
                        }
                    )
                )
                await conn.execute(
                    j.table.update()
                    .where(j.c("id") == job)
                    .values({j.c("status").name: "RUNNING", j.c("started_at").name: now})
                )
                await insert_events(
                    conn,
                    e,
                    jobs=[job],
                    event_type="CLAIMED",
                    note="Demo worker claimed it",
                    now=now,
                )
                done.claimed += 1
                continue
            error = await self._original_error(conn, e, job)
            if error is not None and FAILS_AGAIN.search(error):
                await conn.execute(
                    m.table.update()
                    .where(m.c("id") == message)
                    .values({m.c("status").name: "DLQ", m.c("last_error").name: error})
                )
                await conn.execute(
                    j.table.update()
                    .where(j.c("id") == job)
                    .values(
                        {
                            j.c("status").name: "FAILED",
                            j.c("error_message").name: error,
                            j.c("finished_at").name: now,
                        }
                    )
                )
                await insert_events(conn, e, jobs=[job], event_type="FAILED", note=error, now=now)
                await insert_events(
                    conn,
                    e,
                    jobs=[job],
                    event_type="DLQ",
                    note="Message moved to DLQ after the redrive",
                    now=now,
                )
                done.failed += 1
            else:
                await conn.execute(
                    m.table.update()
                    .where(m.c("id") == message)
                    .values({m.c("status").name: "COMPLETED"})
                )
                await conn.execute(
                    j.table.update()
                    .where(j.c("id") == job)
                    .values(
                        {
                            j.c("status").name: "SUCCEEDED",
                            j.c("progress_percent").name: 100,
                            j.c("finished_at").name: now,
                        }
                    )
                )
                await insert_events(
                    conn, e, jobs=[job], event_type="SUCCEEDED", note="Clip rendered", now=now
                )
                done.succeeded += 1

    @staticmethod
    async def _original_error(conn: AsyncConnection, e: BoundTable, job: Any) -> str | None:
        """The error the job last died of, from its newest FAILED event."""
        return (
            await conn.execute(
                sa.select(e.c("message"))
                .where(e.c("aggregate_id") == job, e.c("event_type") == "FAILED")
                .order_by(e.c("created_at").desc())
                .limit(1)
            )
        ).scalar_one_or_none()

    # -- worker_queue --------------------------------------------------------------------

    async def _workers(
        self, conn: AsyncConnection, queue: str, profile: QueueProfile, done: Pass
    ) -> None:
        q = (await profile.tables(conn))["queue"]
        now = self.estate.clock()
        ours = await self._put_back(conn, queue)
        if not ours:
            return
        keys = [profile.coerce_id(q.c("id"), i) for i in ours]
        rows = await conn.execute(
            sa.select(q.c("id"), q.c("status"), q.c("job_type"), q.c("issue_number")).where(
                q.isin("id", keys), q.c("status").in_(("queued", "running"))
            )
        )
        for key, status, job_type, issue in rows.all():
            if not self._due(queue, str(plain(key)), str(status)):
                continue
            row = sa.and_(q.c("id") == key, q.c("status") == status)
            if status == "queued":
                await conn.execute(
                    q.table.update()
                    .where(row)
                    .values(
                        {
                            q.c("status").name: "running",
                            q.c("server_node").name: "demo-worker",
                            q.c("claimed_at").name: now,
                            q.c("started_at").name: now,
                            q.c("heartbeat_at").name: now,
                        }
                    )
                )
                done.claimed += 1
            elif job_type == BROKEN_JOB_TYPE:
                error = f"spawn failed exit=1: Invalid job_type {job_type} (issue #{issue})"
                await conn.execute(
                    q.table.update()
                    .where(row)
                    .values(
                        {
                            q.c("status").name: "failed",
                            q.c("failure_reason").name: "implementation_error",
                            q.c("error_message").name: error,
                            q.c("retry_count").name: q.c("retry_count") + 1,
                            q.c("heartbeat_at").name: now,
                        }
                    )
                )
                done.failed += 1
            else:
                await conn.execute(
                    q.table.update()
                    .where(row)
                    .values({q.c("status").name: "done", q.c("heartbeat_at").name: now})
                )
                done.succeeded += 1

    @staticmethod
    async def _put_back(conn: AsyncConnection, queue: str) -> list[str]:
        """Rows of ``queue`` queuebot redrove (its redrive log) or requeued (its executed
        requeue requests)."""
        ids = set(
            (
                await conn.execute(
                    sa.select(_redrives.c.job_id).where(_redrives.c.queue == queue).distinct()
                )
            )
            .scalars()
            .all()
        )
        results = await conn.execute(
            sa.select(_requests.c.result).where(
                _requests.c.queue == queue,
                _requests.c.kind == "requeue",
                _requests.c.state == "executed",
            )
        )
        for result in results.scalars().all():
            ids.update(str(i) for i in (result or {}).get("changed", []))
        return sorted(ids)
