"""The message_job profile's part of ``queuebot demo``: the ``clips`` estate (assets,
jobs, their messages and events; ``COUNTS``) and the simulated worker's pass over the
jobs queuebot redrove."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.demo_kit import Due, Ids, Pass, ProfileDemo, insert
from services.estate.message_job.events import REDRIVE_EVENT, insert_events
from services.estate.profile import QueueProfile, plain
from services.estate.tables import BoundTable

FAILS_AGAIN = re.compile(r"upstream timeout", re.IGNORECASE)  # the original error
TRANSCODER = "transcoder"  # the fault behind it, by the name `/demo fix` takes
TENANTS = ("acme", "globex", "initech", "umbrella")
DLQ_ERRORS = (  # (count, template, asset deleted?)
    (14, "ffmpeg exited with code 137 while transcoding segment {n} of asset {asset}", False),
    (8, "S3 GetObject failed: NoSuchKey: s3://clips-prod/{tenant}/{asset}.mp4", True),
    (5, "Invalid media: moov atom not found in {asset}.mp4", False),
    (3, "upstream timeout after {ms} ms calling transcoder-{n}", False),
)
COUNTS = {
    "messages": {"COMPLETED": 124, "PENDING": 29, "PROCESSING": 6, "DLQ": 30},
    "jobs": {"SUCCEEDED": 120, "QUEUED": 27, "RUNNING": 6, "FAILED": 30, "CANCELLED": 4},
    "stuck": 3,
    "duplicate_groups": 2,
}


class MessageJobDemo(ProfileDemo):
    counts = COUNTS
    faults = {TRANSCODER: 'the transcoder times out: clips jobs that died of "upstream timeout"'}

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    async def fill(  # noqa: PLR0915 - one readable recipe of the demo's rows
        self, conn: AsyncConnection, now: datetime
    ) -> str:
        p = self.profile
        t = await p.tables(conn)
        ids = Ids(2026)
        assets: list[dict[str, Any]] = []
        jobs: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []

        def key(role: str, value: uuid.UUID) -> Any:
            return p.coerce_id(t[role].c("id"), str(value))

        def event(job: Any, kind: str, text: str, at: datetime) -> None:
            events.append(
                {
                    "id": key("events", ids.uuid()),
                    "aggregate_id": job,
                    "event_type": kind,
                    "message": text,
                    "created_at": at,
                }
            )

        def job(
            i: int,
            status: str,
            created: datetime,
            *,
            deleted: bool = False,
            error: str | None = None,
            started: datetime | None = None,
            finished: datetime | None = None,
            attempts: int = 1,
            progress: int = 0,
        ) -> tuple[Any, str]:
            tenant = TENANTS[i % len(TENANTS)]
            asset_id = key("assets", ids.uuid())
            assets.append(
                {
                    "id": asset_id,
                    "tenant_id": tenant,
                    "source_object_key": f"uploads/{tenant}/{asset_id}.mp4",
                    "status": "DELETED" if deleted else "READY",
                    "created_at": created,
                }
            )
            job_id = key("jobs", ids.uuid())
            jobs.append(
                {
                    "id": job_id,
                    "asset_id": asset_id,
                    "tenant_id": tenant,
                    "status": status,
                    "attempt_count": attempts,
                    "progress_percent": progress,
                    "error_message": error,
                    "created_at": created,
                    "started_at": started,
                    "finished_at": finished,
                    "payload": {"clip": i, "source": f"uploads/{tenant}/{asset_id}.mp4"},
                }
            )
            event(job_id, "QUEUED", "Clip job accepted", created)
            return job_id, tenant

        def message(
            job_id: Any,
            status: str,
            available: datetime,
            *,
            claimed: datetime | None,
            attempts: int,
            error: str | None = None,
        ) -> None:
            messages.append(
                {
                    "id": key("messages", ids.uuid()),
                    "job_id": job_id,
                    "status": status,
                    "attempt_count": attempts,
                    "available_at": available,
                    "claimed_at": claimed,
                    "last_error": error,
                }
            )

        n = 0
        for i in range(120):  # succeeded
            created = now - timedelta(hours=23, minutes=-i * 11)
            done = created + timedelta(minutes=3 + i % 7)
            jid, _ = job(
                n,
                "SUCCEEDED",
                created,
                started=created + timedelta(seconds=20),
                finished=done,
                progress=100,
            )
            message(jid, "COMPLETED", created, claimed=created + timedelta(seconds=20), attempts=1)
            event(jid, "CLAIMED", "Worker claimed message", created + timedelta(seconds=20))
            event(jid, "SUCCEEDED", "Clip rendered", done)
            n += 1
        for i in range(25):  # pending, oldest 52 minutes
            created = now - timedelta(minutes=52 - 2 * i)
            jid, _ = job(n, "QUEUED", created, attempts=0)
            message(jid, "PENDING", created, claimed=None, attempts=0)
            n += 1
        for i in range(6):  # running; the first three are stuck past 15 minutes
            claimed = now - timedelta(minutes=(40 + 10 * i) if i < 3 else (2 + i))
            jid, _ = job(
                n,
                "RUNNING",
                claimed - timedelta(minutes=1),
                started=claimed,
                progress=35 if i < 3 else 60,
            )
            message(jid, "PROCESSING", claimed - timedelta(minutes=1), claimed=claimed, attempts=1)
            event(jid, "CLAIMED", "Worker claimed message", claimed)
            n += 1
        first_dead: Any = None
        k = 0
        for count, template, deleted in DLQ_ERRORS:  # dead letters, three attempts each
            for _ in range(count):
                created = now - timedelta(hours=6, minutes=k * 7)
                failed = created + timedelta(minutes=9)
                asset_hint = ids.uuid()
                error = template.format(
                    n=3 + k % 17, asset=asset_hint, ms=30000, tenant=TENANTS[n % len(TENANTS)]
                )
                jid, _ = job(
                    n,
                    "FAILED",
                    created,
                    deleted=deleted,
                    error=error,
                    started=created + timedelta(minutes=1),
                    finished=failed,
                    attempts=3,
                    progress=20,
                )
                message(
                    jid,
                    "DLQ",
                    created + timedelta(minutes=6),
                    claimed=failed,
                    attempts=3,
                    error=error,
                )
                for attempt in (1, 2, 3):
                    event(
                        jid,
                        "CLAIMED",
                        f"Worker claimed message (attempt {attempt})",
                        created + timedelta(minutes=3 * attempt - 2),
                    )
                    event(
                        jid,
                        "RETRY" if attempt < 3 else "FAILED",
                        error,
                        created + timedelta(minutes=3 * attempt),
                    )
                event(jid, "DLQ", "Message moved to DLQ after 3 attempts", failed)
                first_dead = first_dead if first_dead is not None else jid
                n += 1
                k += 1
        for i in range(4):  # cancelled on purpose
            created = now - timedelta(hours=3, minutes=i * 13)
            jid, _ = job(n, "CANCELLED", created, finished=created + timedelta(minutes=2))
            message(jid, "COMPLETED", created, claimed=created + timedelta(seconds=30), attempts=1)
            event(jid, "CANCELLED", "Cancelled by tenant request", created + timedelta(minutes=2))
            n += 1
        for i in range(2):  # a network hiccup enqueued these twice
            created = now - timedelta(minutes=20 + i)
            jid, _ = job(n, "QUEUED", created, attempts=0)
            message(jid, "PENDING", created, claimed=None, attempts=0)
            message(jid, "PENDING", created + timedelta(seconds=4), claimed=None, attempts=0)
            n += 1

        await insert(conn, t["assets"], assets)
        await insert(conn, t["jobs"], jobs)
        await insert(conn, t["messages"], messages)
        await insert(conn, t["events"], events)
        return str(first_dead)

    async def work(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        due: Due,
        done: Pass,
        fixed: frozenset[str] = frozenset(),
    ) -> None:
        """PENDING messages of jobs with a ``REDRIVE_REQUESTED`` event are claimed
        (PROCESSING, job RUNNING) and then COMPLETED / SUCCEEDED, or, for a job whose last
        ``FAILED`` event says "upstream timeout" while the transcoder is still down (not
        in ``fixed``), DLQ / FAILED again with that error and the ``FAILED`` and ``DLQ``
        events the estate writes."""
        queue = self.profile.queue
        t = await self.profile.tables(conn)
        m, j, e = t["messages"], t["jobs"], t["events"]
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
            if not due(queue, str(plain(message)), str(status)):
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
            broken = TRANSCODER not in fixed
            if broken and error is not None and FAILS_AGAIN.search(error):
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
