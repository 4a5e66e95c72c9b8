"""A realistic, deterministic demo estate of both profiles (``queuebot demo``).

The composition is fixed so that the numbers a person sees in the demo, and the numbers
the integration tests assert, are known: see ``MESSAGE_JOB_COUNTS`` and
``WORKER_QUEUE_COUNTS``. Timestamps are relative to ``now``.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.ddl import create_estate_tables
from services.estate.message_job import MessageJobProfile
from services.estate.profile import QueueProfile
from services.estate.tables import BoundTable
from services.estate.worker_queue import WorkerQueueProfile

TENANTS = ("acme", "globex", "initech", "umbrella")
DLQ_ERRORS = (  # (count, template, asset deleted?)
    (14, "ffmpeg exited with code 137 while transcoding segment {n} of asset {asset}", False),
    (8, "S3 GetObject failed: NoSuchKey: s3://clips-prod/{tenant}/{asset}.mp4", True),
    (5, "Invalid media: moov atom not found in {asset}.mp4", False),
    (3, "upstream timeout after {ms} ms calling transcoder-{n}", False),
)
MESSAGE_JOB_COUNTS = {
    "messages": {"COMPLETED": 124, "PENDING": 29, "PROCESSING": 6, "DLQ": 30},
    "jobs": {"SUCCEEDED": 120, "QUEUED": 27, "RUNNING": 6, "FAILED": 30, "CANCELLED": 4},
    "stuck": 3,
    "duplicate_groups": 2,
}
WORKER_QUEUE_COUNTS = {
    "status": {
        "done": 150,
        "queued": 20,
        "claimed": 4,
        "running": 5,
        "failed": 21,
        "failed_permanently": 3,
        "cancelled": 11,
    },
    "failed_reasons": {
        "implementation_error": 7,
        "timeout": 8,
        "spawn_oom": 4,
        "spawn_ram": 2,
        "mutex_collision": 2,
        "stale_duplicate": 1,
    },
    "stuck": 3,
    "duplicate_groups": 3,
    "duplicates_of_active": 2,
}


@dataclass(frozen=True)
class DemoEstate:
    dead_job_id: str
    worker_failed_id: str


class _Ids:
    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)  # noqa: S311 - reproducible demo ids, not secrets

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._rng.randbytes(16), version=4)


async def build_demo_estate(
    conn: AsyncConnection, *, now: datetime, clips: str = "clips", workers: str = "workers"
) -> DemoEstate:
    """Create both estates' tables from the shipped DDL and fill them. Not idempotent:
    call it on an empty database."""
    from services.config import QueueConfig

    mj = MessageJobProfile(clips, QueueConfig(profile="message_job"))
    wq = WorkerQueueProfile(workers, QueueConfig(profile="worker_queue"))
    await create_estate_tables(conn, mj.name)
    await create_estate_tables(conn, wq.name)
    dead = await _fill_message_job(conn, mj, now)
    failed = await _fill_worker_queue(conn, wq, now)
    return DemoEstate(dead_job_id=dead, worker_failed_id=failed)


async def _insert(conn: AsyncConnection, table: BoundTable, rows: list[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(table.table.insert(), rows)


async def _fill_message_job(  # noqa: PLR0915 - one readable recipe of the demo's rows
    conn: AsyncConnection, p: QueueProfile, now: datetime
) -> str:
    t = await p.tables(conn)
    ids = _Ids(2026)
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
                jid, "DLQ", created + timedelta(minutes=6), claimed=failed, attempts=3, error=error
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

    await _insert(conn, t["assets"], assets)
    await _insert(conn, t["jobs"], jobs)
    await _insert(conn, t["messages"], messages)
    await _insert(conn, t["events"], events)
    return str(first_dead)


async def _fill_worker_queue(conn: AsyncConnection, p: QueueProfile, now: datetime) -> str:
    q = (await p.tables(conn))["queue"]
    rows: list[dict[str, Any]] = []
    types = ("dev-issue", "review-pr", "continue-issue", "infra-task", "review-plan", "infra-alert")

    def row(issue: int | None, job_type: str, status: str, queued: datetime, **extra: Any) -> None:
        base: dict[str, Any] = {
            "issue_number": issue,
            "github_issue_number": issue,
            "job_type": job_type,
            "status": status,
            "failure_reason": None,
            "error_message": None,
            "retry_count": 0,
            "max_retries": 3,
            "queued_at": queued,
            "next_attempt_at": None,
            "server_node": None,
            "server_preference": None,
            "claimed_at": None,
            "started_at": None,
            "heartbeat_at": None,
            "analyst_notes": None,
        }
        base.update(extra)
        rows.append(base)

    for i in range(150):
        queued = now - timedelta(hours=20, minutes=-i * 7)
        row(
            1000 + i,
            types[i % len(types)],
            "done",
            queued,
            server_node=f"bms-{1 + i % 4}",
            claimed_at=queued + timedelta(minutes=1),
            started_at=queued + timedelta(minutes=2),
            heartbeat_at=queued + timedelta(minutes=30),
        )
    for i in range(12):
        row(2000 + i, types[i % 2], "queued", now - timedelta(minutes=45 - 3 * i))
    for i in range(3):  # issues queued twice (the duplicate query finds them)
        for j in range(2):
            row(2100 + i, "dev-issue", "queued", now - timedelta(minutes=30 - i - j))
    for i in range(2):  # queued again although already done: duplicates too
        row(1000 + i, types[i % len(types)], "queued", now - timedelta(minutes=12 + i))
    for i in range(4):
        claimed = now - timedelta(minutes=(25 + 15 * i) if i < 2 else 3)
        row(
            3000 + i,
            "dev-issue",
            "claimed",
            claimed - timedelta(minutes=2),
            claimed_at=claimed,
            server_node="bms-2",
        )
    for i in range(5):
        beat = now - timedelta(minutes=50 if i == 0 else 1)
        row(
            3100 + i,
            types[i % 3],
            "running",
            now - timedelta(hours=1),
            server_node="bms-3",
            claimed_at=now - timedelta(minutes=58),
            started_at=now - timedelta(minutes=57),
            heartbeat_at=beat,
        )

    def failed(
        issue: int,
        job_type: str,
        reason: str,
        error: str,
        *,
        minutes: int,
        retries: int = 1,
        status: str = "failed",
        node: str = "bms-1",
    ) -> None:
        queued = now - timedelta(minutes=minutes)
        row(
            issue,
            job_type,
            status,
            queued,
            failure_reason=reason,
            error_message=error,
            retry_count=retries,
            server_node=node,
            claimed_at=queued + timedelta(minutes=1),
            next_attempt_at=queued + timedelta(minutes=16) if status == "failed" else None,
        )

    for i in range(4):
        failed(
            4000 + i,
            "continue-issue",
            "implementation_error",
            f"spawn failed exit=1: Invalid job_type continue-issue (issue #{4000 + i})",
            minutes=90 + i,
        )
    for i in range(3):
        failed(
            4010 + i,
            "dev-issue",
            "implementation_error",
            f"spawn-worker.sh: allowlist miss for repo p24-web (issue #{4010 + i})",
            minutes=120 + 5 * i,
        )
    for i in range(5):
        failed(
            4100 + i,
            "review-pr",
            "timeout",
            f"ssh spawn timed out after 120s on bms-{i % 2}",
            minutes=200 + i,
            retries=3 if i < 2 else 1,
        )
    for i in range(3):
        failed(
            4200 + i,
            "dev-issue",
            "timeout",
            "max spawn retries hit (3/3)",
            minutes=2000 + i,
            retries=3,
            status="failed_permanently",
        )
    for i in range(4):  # three OOMs on bms-4 inside 30 minutes: a node to take out
        failed(
            4300 + i,
            "dev-issue",
            "spawn_oom",
            f"worker OOM-killed at weight tier {2 + i % 2}",
            minutes=10 + 6 * i if i < 3 else 240,
            node="bms-4" if i < 3 else "bms-2",
        )
    for i in range(2):
        failed(
            4400 + i,
            "infra-task",
            "spawn_ram",
            "only 812 MiB free at spawn, need 2048 MiB",
            minutes=8 + i,
            node="bms-1",
        )
    for i in range(2):  # pre-PR #2091 orphans
        failed(
            4500 + i, "dev-issue", "mutex_collision", "claim_task returned NULL", minutes=3000 + i
        )
    failed(
        4600, "dev-issue", "stale_duplicate", "issue already closed before dispatch", minutes=3100
    )
    for reason, count, text in (
        ("stale_duplicate", 6, "issue already closed before dispatch"),
        ("mutex_collision", 3, "another worker holds the issue lock"),
        ("other", 2, "duplicate queued row: issue already running"),
    ):
        for i in range(count):
            row(
                5000 + i,
                "dev-issue",
                "cancelled",
                now - timedelta(hours=2, minutes=i),
                failure_reason=reason,
                error_message=text,
            )

    await _insert(conn, q, rows)
    first = await conn.execute(sa.select(sa.func.min(q.c("id"))).where(q.c("status") == "failed"))
    return str(first.scalar_one())
