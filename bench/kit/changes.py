"""queuebot's services wired as the bot wires them (no chat, nothing periodic), a redrive
requested and approved through them, and a message_job estate of dead letters to redrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import Services, wire_services
from services.audit import Actor, AuditTrail
from services.changes.requests import ChangeRequests
from services.config import ApprovalConfig, QueueConfig, RedriveConfig
from services.db.migrate import upgrade
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.ops import Selector
from services.row_changes.approvable import REDRIVE

CLIPS = {"clips": QueueConfig(profile="message_job")}
REQUESTER = Actor("alice", "bench", "alice")
APPROVER = Actor("bob", "bench", "bob")
ERROR = "ffmpeg exited with code 137 while transcoding segment "


def now() -> datetime:
    return datetime.now(UTC)


def wire(
    engine: AsyncEngine,
    queues: Mapping[str, QueueConfig] = CLIPS,
    *,
    clock: Callable[[], datetime] = now,
    estate: Estate | None = None,
    jobs: int | None = None,
    redrive: RedriveConfig | None = None,
    audit: AuditTrail | None = None,
    **more: Any,
) -> Services:
    """The services over one database holding queuebot's tables and the estate of
    ``queues`` (or ``estate``), without chat or housekeeping. ``jobs``: a change of that
    many rows is not "large" (one approval takes it); ``more`` goes to ``wire_services``."""
    approval = ApprovalConfig() if jobs is None else ApprovalConfig(large_change_rows=jobs + 1)
    return wire_services(
        state_engine=engine,
        estate=estate or Estate(engine=engine, queues=dict(queues), clock=clock),
        clock=clock,
        approval=approval,
        redrive=redrive or RedriveConfig(),
        notifier=None,
        audit=audit or AuditTrail(),
        one_database=False,
        **more,
    )


@dataclass(frozen=True)
class Redriven:
    """A redrive's change request and its approval: how long each took, rows changed."""

    request_s: float
    approve_s: float
    changed: int

    @property
    def seconds(self) -> float:
        return self.request_s + self.approve_s


async def redrive(
    changes: ChangeRequests,
    queue: str,
    ids: Sequence[str],
    *,
    reason: str = "bench",
    requester: Actor = REQUESTER,
    approver: Actor = APPROVER,
    mark: Callable[[str], None] | None = None,
) -> Redriven:
    """A change request redriving ``ids`` and its approval (which runs it), timed;
    ``mark`` is told "request", "approve" and "done" as each part starts and the whole
    ends (a statement timer's or a plan collector's boundaries), outside the timed part."""
    tell = mark or (lambda _part: None)
    tell("request")
    t0 = time.perf_counter()
    view = await changes.request(
        kind=REDRIVE,
        queue=queue,
        selector=Selector(ids=tuple(ids)),
        reason=reason,
        actor=requester,
    )
    t1 = time.perf_counter()
    tell("approve")
    t1b = time.perf_counter()
    decision = await changes.approve(number=view.number, actor=approver)
    t2 = time.perf_counter()
    tell("done")
    changed = len(decision.view.result.changed) if decision.view.result else 0
    return Redriven(t1 - t0, t2 - t1b, changed)


def dead_letters_sql(claimed: str = "now()") -> list[str]:
    """``:n`` dead-lettered message_job jobs: each an asset, a FAILED job and its DLQ
    message, the error one of 40 texts; ``claimed``: the messages' ``claimed_at``."""
    return [
        """
INSERT INTO video_assets (id, tenant_id, source_object_key, status)
SELECT md5('a' || g)::uuid, 'tenant-' || (g % 7), 'uploads/' || g || '.mp4', 'READY'
FROM generate_series(1, :n) g""",
        f"""
INSERT INTO clip_jobs (id, asset_id, tenant_id, status, attempt_count, progress_percent,
                       error_message, started_at, finished_at)
SELECT md5('j' || g)::uuid, md5('a' || g)::uuid, 'tenant-' || (g % 7), 'FAILED', 3, 20,
       '{ERROR}' || (g % 40), now(), now()
FROM generate_series(1, :n) g""",
        f"""
INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, claimed_at,
                            last_error)
SELECT md5('m' || g)::uuid, md5('j' || g)::uuid, 'DLQ', 3, now(), {claimed},
       '{ERROR}' || (g % 40)
FROM generate_series(1, :n) g""",
    ]


# The indexes a redrive's own statements use, and autovacuum off on the estate's tables,
# so that it never starts in the middle of a measured run.
FOR_REDRIVE = (
    "CREATE INDEX IF NOT EXISTS bench_qm_job ON queue_messages (job_id)",
    "CREATE INDEX IF NOT EXISTS bench_ev_agg ON job_events (aggregate_id, created_at)",
    "ALTER TABLE queue_messages SET (autovacuum_enabled = false)",
    "ALTER TABLE clip_jobs SET (autovacuum_enabled = false)",
    "ALTER TABLE job_events SET (autovacuum_enabled = false)",
)


async def dead_letters(
    engine: AsyncEngine, jobs: int, *, claimed: str = "now()", then: Sequence[str] = ()
) -> None:
    """queuebot's tables and a message_job estate of ``jobs`` dead letters
    (``dead_letters_sql``), then the statements ``then``, in one transaction."""
    await upgrade(engine)
    async with engine.begin() as conn:
        await create_estate_tables(conn, "message_job")
        for statement in (*dead_letters_sql(claimed), *then):
            await conn.execute(sa.text(statement), {"n": jobs})


async def job_ids(engine: AsyncEngine) -> list[str]:
    """Every job's id, in id order."""
    async with engine.connect() as conn:
        found = await conn.execute(sa.text("SELECT id FROM clip_jobs ORDER BY id"))
        return [str(r[0]) for r in found]
