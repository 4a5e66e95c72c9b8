"""A queue whose table is missing fails the background loops until a person fixes it:
each distinct problem is one log line (then a reminder only while it lasts), never a
traceback every pass, and the work is retried with backoff all along."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox
from services.errors import ConfigError
from services.outbox import Outbox
from services.scheduler import Scheduler, schedule
from tests.integration.support import START, Clock

MISSING = {
    "workers": "queue 'workers' (worker_queue): table 'dev_r_worker_queue' does not exist",
    "clips": "queue 'clips' (message_job): table 'queue_messages' does not exist",
}


async def sample(conn: AsyncConnection, subject: str, now: datetime) -> None:
    raise ConfigError(MISSING[subject])


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


async def test_the_scheduler_says_a_missing_table_once_and_keeps_retrying(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    sched = Scheduler(engine=engine, clock=clock)
    sched.register("queue.sample", sample)
    async with engine.begin() as conn:
        for queue in MISSING:
            await schedule(conn, kind="queue.sample", subject=queue, due_at=START, created_at=START)
    with caplog.at_level(logging.INFO, logger="queuebot.scheduler"):
        for _ in range(8):
            assert await sched.run_due() == 2  # both are due again: retried, not dropped
            clock.advance(minutes=6)  # past the longest backoff
    said = lines(caplog, "queuebot.scheduler")
    assert [r.exc_info for r in said] == [None, None]  # no traceback
    assert sorted(r.getMessage() for r in said) == sorted(
        f"the scheduler: scheduled queue.sample {queue} failed: {message} (retried with "
        "backoff; said again only if it lasts)"
        for queue, message in MISSING.items()
    )
    async with engine.connect() as conn:
        attempts = (await conn.execute(sa.text("SELECT attempts FROM qb_schedule"))).scalars()
        assert list(attempts) == [8, 8]


async def test_the_outbox_relay_says_a_configuration_problem_once(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    relay = Outbox(engine=engine, clock=clock)

    async def deliver(item: outbox.Item) -> None:
        raise ConfigError(MISSING["clips"])

    relay.register("plan.news", deliver)
    async with engine.begin() as conn:
        await outbox.add(conn, kind="plan.news", subject="P-1", payload={}, now=START)
    with caplog.at_level(logging.INFO, logger="queuebot.outbox"):
        for _ in range(5):
            assert len(await relay.run_due()) == 1  # failed again, kept for the next try
            clock.advance(minutes=6)
    said = lines(caplog, "queuebot.outbox")
    assert [r.getMessage() for r in said] == [
        f"the outbox relay: delivering plan.news P-1 failed: {MISSING['clips']} (retried with "
        "backoff; said again only if it lasts)"
    ]


async def test_a_pass_that_fails_on_configuration_backs_off(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = 0

    async def failing(limit: int = 1000) -> int:
        nonlocal passes
        passes += 1
        raise ConfigError(MISSING["workers"])

    sched = Scheduler(engine=engine, clock=Clock(), interval=0.01)
    monkeypatch.setattr(sched, "run_due", failing)
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="queuebot.scheduler"):
        task = asyncio.create_task(sched.run_forever(stop))
        await asyncio.sleep(0.6)
        stop.set()
        await task
    assert 3 <= passes <= 8  # 0.01 s apart at first, then twice as long each time
    assert len(lines(caplog, "queuebot.scheduler")) == 1
