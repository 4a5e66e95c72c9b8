"""``queuebot demo``: a SQLite demo estate of both profiles, a demo config, the console,
and a simulated worker beside it (``services/estate/demo_worker.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.config import Config
from services.db import create_engine, reading
from services.db.tables import ChangeRequest, Plan
from services.estate.demo import build_demo_estate
from services.estate.demo_worker import DemoWorker
from services.estate.estate import Estate
from services.estate.registry import shipped_profiles
from services.reads import samples

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
discord = "100000000000000003"
roles = ["duty-officer", "operator"]

[roles]
"operations duty officer" = "duty-officer"
"service on-call" = "operator"

[approval]
expiry_minutes = 30

[redrive]
poll_seconds = 2                 # the demo's worker is quick: look at a running wave often
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


@asynccontextmanager
async def running_demo_worker(config: Config) -> AsyncIterator[DemoWorker]:
    """The simulated worker over the demo's estate, as a task beside the console for as
    long as the block lasts (its own engine: SQLite's WAL lets it write between the
    console's transactions)."""
    engine = create_engine(config.env.estate_url, settings=config.file.database)
    estate = Estate(engine=engine, queues=config.queues, registry=shipped_profiles())
    worker = DemoWorker(estate)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task
        await engine.dispose()


_requests = cast(sa.Table, ChangeRequest.__table__)
_plans = cast(sa.Table, Plan.__table__)


@dataclass(frozen=True)
class DemoState:
    """What the banner's suggestions depend on: the numbers the next request and plan
    will get, and the plans still active (number, queue, state)."""

    next_request: int
    next_plan: int
    active_plans: list[tuple[int, str, str]]


async def demo_state(engine: AsyncEngine) -> DemoState:
    async with reading(engine) as conn:
        last_request = (await conn.execute(sa.select(sa.func.max(_requests.c.id)))).scalar()
        last_plan = (await conn.execute(sa.select(sa.func.max(_plans.c.id)))).scalar()
        active = (
            await conn.execute(
                sa.select(_plans.c.id, _plans.c.queue, _plans.c.state)
                .where(_plans.c.state.in_(("running", "halted")))
                .order_by(_plans.c.id)
            )
        ).all()
    return DemoState(
        next_request=int(last_request or 0) + 1,
        next_plan=int(last_plan or 0) + 1,
        active_plans=[(int(n), str(q), str(st)) for n, q, st in active],
    )
