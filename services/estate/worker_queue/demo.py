"""The worker_queue profile's part of ``queuebot demo``: the ``workers`` estate (one
queue table; ``COUNTS``) and the simulated worker's pass over the rows queuebot
requeued or redrove."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import ChangeRequest, RedriveLog
from services.estate.demo_kit import Due, Pass, ProfileDemo, insert
from services.estate.profile import QueueProfile, plain

BROKEN_JOB_TYPE = "continue-issue"  # still not an allowed job type
ALLOWLIST = "allowlist"  # the fault behind it, by the name `/demo fix` takes
_requests = cast(sa.Table, ChangeRequest.__table__)
_redrives = cast(sa.Table, RedriveLog.__table__)
COUNTS = {
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


class WorkerQueueDemo(ProfileDemo):
    counts = COUNTS
    faults = {ALLOWLIST: f"the spawner's allowlist lacks job type {BROKEN_JOB_TYPE}: workers rows"}

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    async def fill(self, conn: AsyncConnection, now: datetime) -> str:
        q = (await self.profile.tables(conn))["queue"]
        rows: list[dict[str, Any]] = []
        types = (
            "dev-issue",
            "review-pr",
            "continue-issue",
            "infra-task",
            "review-plan",
            "infra-alert",
        )

        def row(
            issue: int | None, job_type: str, status: str, queued: datetime, **extra: Any
        ) -> None:
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
                "payload": {"issue": issue, "repo": "p24-web", "job": job_type},
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
                4500 + i,
                "dev-issue",
                "mutex_collision",
                "claim_task returned NULL",
                minutes=3000 + i,
            )
        failed(
            4600,
            "dev-issue",
            "stale_duplicate",
            "issue already closed before dispatch",
            minutes=3100,
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

        await insert(conn, q, rows)
        first = await conn.execute(
            sa.select(sa.func.min(q.c("id"))).where(q.c("status") == "failed")
        )
        return str(first.scalar_one())

    async def work(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        due: Due,
        done: Pass,
        fixed: frozenset[str] = frozenset(),
    ) -> None:
        """Queued rows queuebot requeued or redrove go running, then done, or, for job
        type ``continue-issue`` while its allowlist is not fixed, failed again with
        ``implementation_error`` and the original "Invalid job_type" error. The table
        keeps no record of who requeued a row, so queuebot's own records (its redrive log
        and its executed requeues) name them."""
        queue, profile = self.profile.queue, self.profile
        q = (await profile.tables(conn))["queue"]
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
            if not due(queue, str(plain(key)), str(status)):
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
            elif job_type == BROKEN_JOB_TYPE and ALLOWLIST not in fixed:
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
