"""A realistic, deterministic demo estate of both profiles (``queuebot demo``): a
message_job queue (``clips``) and a worker_queue one (``workers``), each built and filled
by its profile's demo (``<profile>/demo.py``, whose ``COUNTS`` are the numbers a person
sees and the integration tests assert). Timestamps are relative to ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.ddl import create_estate_tables
from services.estate.message_job import MessageJobProfile
from services.estate.profile import QueueProfile
from services.estate.worker_queue import WorkerQueueProfile


@dataclass(frozen=True)
class DemoEstate:
    dead_job_id: str
    worker_failed_id: str


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
    dead = await _fill(conn, mj, now)
    failed = await _fill(conn, wq, now)
    return DemoEstate(dead_job_id=dead, worker_failed_id=failed)


async def _fill(conn: AsyncConnection, profile: QueueProfile, now: datetime) -> str:
    demo = profile.demo()
    assert demo is not None, f"the {profile.name} profile ships a demo"
    return await demo.fill(conn, now)
