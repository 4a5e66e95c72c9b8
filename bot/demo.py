"""``queuebot demo``: a SQLite demo estate of both profiles, a demo config, the console."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services import samples
from services.db import create_engine
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate

DEMO_CONFIG = """\
# queuebot demo configuration (written by `queuebot demo`; edit freely).
# Run the console on it again with:  queuebot --config {config} console --as alice

[queues.clips]                   # queue_messages + clip_jobs + job_events + video_assets
profile = "message_job"

[queues.workers]                 # one table: dev_r_worker_queue
profile = "worker_queue"

[channels.alerts]
slack = "C0ALERTS"
discord = "200000000000000001"
[channels.operators]
slack = "C0OPS"
[channels.actors]
slack = "C0ACTORS"

[people.alice]
slack = "U0ALICE"
discord = "100000000000000001"
roles = ["operator", "approver"]

[people.bob]
slack = "U0BOB"
discord = "100000000000000002"
roles = ["operator", "approver"]

[people.dora]
slack = "U0DORA"
roles = ["duty-officer", "operator"]

[roles]
"operations duty officer" = "duty-officer"
"service on-call" = "operator"

[approval]
expiry_minutes = 30
"""


def _remove_sqlite_files(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def demo_url(db: Path) -> str:
    return f"sqlite+aiosqlite:///{db}"


def write_demo_config(path: Path, *, overwrite: bool) -> bool:
    if path.exists() and not overwrite:
        return False
    path.write_text(DEMO_CONFIG.format(config=path), encoding="utf-8")
    return True


async def ensure_demo_estate(db: Path, *, fresh: bool) -> bool:
    """Build the demo estate in ``db`` unless it is already there; True when built."""
    if fresh:
        await asyncio.to_thread(_remove_sqlite_files, db)
    engine = create_engine(demo_url(db))
    try:
        async with engine.begin() as conn:
            exists = await conn.run_sync(
                lambda c: (
                    sa.inspect(c).has_table("queue_messages")
                    and sa.inspect(c).has_table("dev_r_worker_queue")
                )
            )
            if exists:
                return False
            await build_demo_estate(conn, now=datetime.now(UTC))
            return True
    finally:
        await engine.dispose()


async def record_history(engine: AsyncEngine, estate: Estate, *, ago: timedelta) -> None:
    """Write the demo queues' counts down as of ``ago``: a demo estate arrives with the
    history a running queuebot would have recorded (the redrive growth check needs it)."""
    async with engine.begin() as conn:
        for profile in estate.profiles.values():
            await samples.record(conn, profile=profile, now=estate.clock() - ago)
