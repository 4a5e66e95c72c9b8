"""Plans across real `queuebot serve` processes on one PostgreSQL database: two replicas
advance each wave once, and a SIGKILL mid-plan loses and repeats nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import wire_services
from bot.demo import DEMO_CONFIG
from services.audit import Actor, AuditTrail
from services.config import ApprovalConfig, RedriveConfig, default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate, utcnow
from services.estate.ops import Selector
from services.reads import samples
from testkit.ports import free_port
from tests.e2e.serving import ALERT_TOKEN
from tests.helpers import launch
from tests.helpers.processes import clean_environ, stop
from tests.integration.support import add_dead_letters, simulated_worker
from tests.kinds import ChangeKind

pytestmark = pytest.mark.postgres
ERROR = "transcoder pod evicted while rendering clip 77"
FAST = "\n[redrive]\npoll_seconds = 0.2\nvelocity = 100000\n"


@dataclass
class Setup:
    engine: AsyncEngine
    url: str
    workdir: Path
    plan: int
    jobs: list[str]


@pytest.fixture
async def setup(pg_url: str, tmp_path: Path) -> AsyncIterator[Setup]:
    engine = create_engine(pg_url)
    await upgrade(engine)
    async with engine.begin() as conn:
        await build_demo_estate(conn, now=utcnow())
    jobs = await add_dead_letters(engine, count=200, error=ERROR, at=utcnow())
    estate = Estate(engine=engine, queues=default_queues())
    async with engine.begin() as conn:
        await samples.record(
            conn, profile=estate.profile("clips"), now=utcnow() - timedelta(minutes=15)
        )
    changes = wire_services(
        state_engine=engine,
        estate=estate,
        clock=utcnow,
        approval=ApprovalConfig(large_change_rows=1000),
        redrive=RedriveConfig(poll_seconds=0.2, velocity=100_000),
        notifier=None,
        audit=AuditTrail(),
    ).changes
    request = await changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(error_like="pod evicted"),
        reason="eviction fixed",
        actor=Actor("alice", "t", "a"),
    )
    decision = await changes.approve(number=request.number, actor=Actor("bob", "t", "b"))
    demo = DEMO_CONFIG.format(config="queuebot.toml").split("\n[redrive]")[0]  # ours instead
    (tmp_path / "queuebot.toml").write_text(demo + FAST)
    yield Setup(engine, pg_url, tmp_path, int(decision.view.result.plan or 0), jobs)
    await engine.dispose()


def serve(setup: Setup, name: str) -> subprocess.Popen[bytes]:
    env = clean_environ()
    env.update(
        QUEUEBOT_CONFIG=str(setup.workdir / "queuebot.toml"),
        QUEUEBOT_DATABASE_URL=setup.url,
        QUEUEBOT_ALERT_TOKEN=ALERT_TOKEN,
    )
    log = (setup.workdir / f"{name}.log").open("wb")
    return launch.popen(
        [sys.executable, "-m", "bot.cli", "serve", "--port", str(free_port())],
        cwd=setup.workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


async def plan_state(setup: Setup) -> tuple[str, int]:
    async with setup.engine.connect() as conn:
        state, waves = (
            await conn.execute(
                sa.text("SELECT state, waves FROM qb_plans WHERE id = :p"), {"p": setup.plan}
            )
        ).one()
    parsed = waves if isinstance(waves, dict) else json.loads(waves)
    return str(state), len(parsed["waves"])


async def work_until(setup: Setup, done: object, within: float = 90) -> None:
    """Act as the queue's workers until ``done()`` says the plan reached its goal."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await simulated_worker(setup.engine, now=datetime.now(UTC))
        if await done():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"plan P-{setup.plan} did not get there: {await plan_state(setup)}")


async def assert_each_job_redriven_once(setup: Setup) -> None:
    async with setup.engine.connect() as conn:
        per_job = dict(
            (
                await conn.execute(
                    sa.text(
                        "SELECT CAST(aggregate_id AS VARCHAR(64)), count(*) FROM job_events WHERE "
                        "event_type = 'REDRIVE_REQUESTED' GROUP BY aggregate_id"
                    )
                )
            ).all()
        )
        started = [
            r[0]
            for r in (
                await conn.execute(
                    sa.text(
                        "SELECT details FROM qb_audit_events WHERE action = 'plan.wave_started' "
                        "AND subject = :s ORDER BY id"
                    ),
                    {"s": f"P-{setup.plan}"},
                )
            ).all()
        ]
        states = dict(
            (
                await conn.execute(
                    sa.text(
                        "SELECT state, count(*) FROM qb_plan_items WHERE plan_id = :p "
                        "GROUP BY state"
                    ),
                    {"p": setup.plan},
                )
            ).all()
        )
    assert {per_job.get(job) for job in setup.jobs} == {1}
    waves = [json.loads(d)["wave"] for d in started]
    assert waves == list(range(len(waves))) == list(range(6))  # 5+10+20+40+80+45, once each
    assert states == {"succeeded": 200}


async def test_two_replicas_advance_each_wave_once(setup: Setup) -> None:
    first, second = serve(setup, "a"), serve(setup, "b")
    try:

        async def completed() -> bool:
            return (await plan_state(setup))[0] == "completed"

        await work_until(setup, completed)
        await assert_each_job_redriven_once(setup)
        # both replicas ran the whole time: one that failed to start (its port taken, say)
        # would leave the other to finish alone and prove nothing about two
        assert first.poll() is None and second.poll() is None
    finally:
        stop(first, second, timeout=15)
    for name in ("a", "b"):
        assert "Traceback" not in (setup.workdir / f"{name}.log").read_text()


async def test_sigkill_mid_plan_repeats_nothing_and_finishes(setup: Setup) -> None:
    first = serve(setup, "a")
    try:

        async def third_wave_started() -> bool:
            return (await plan_state(setup))[1] >= 3

        await work_until(setup, third_wave_started)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert (await plan_state(setup))[0] == "running"
        second = serve(setup, "b")
        try:

            async def completed() -> bool:
                return (await plan_state(setup))[0] == "completed"

            await work_until(setup, completed)
        finally:
            stop(second, timeout=15)
        await assert_each_job_redriven_once(setup)
    finally:
        stop(first, timeout=15)
