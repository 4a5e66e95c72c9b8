"""A backlog of due items is worked off at once: a full pass of ``run_forever`` goes
straight on to the next, not to sleep for its interval (reminders and deadlines that
come due together are not held back a second per hundred)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.db import create_engine
from services.migrate import upgrade
from services.scheduler import FollowUp, Scheduler


async def test_a_backlog_of_several_passes_runs_without_waiting_out_the_interval(
    db_url: str,
) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    now = datetime.now(UTC)
    backlog = 250  # two and a half passes of run_forever
    async with engine.begin() as conn:
        for n in range(backlog):
            await scheduler.schedule(
                conn,
                kind="test.tick",
                subject=str(n),
                due_at=now - timedelta(seconds=1),
                created_at=now,
            )
    ran: list[str] = []
    all_ran = asyncio.Event()

    async def tick(conn: AsyncConnection, subject: str, at: datetime) -> list[FollowUp]:
        ran.append(subject)
        if len(ran) == backlog:
            all_ran.set()
        return []

    sched = Scheduler(engine=engine, clock=lambda: datetime.now(UTC), interval=30.0)
    sched.register("test.tick", tick)
    stop = asyncio.Event()
    task = asyncio.create_task(sched.run_forever(stop))
    try:
        # three passes' worth within a fraction of one interval (30 s): no rest between them
        await asyncio.wait_for(all_ran.wait(), timeout=20)
    finally:
        stop.set()
        await task
        await engine.dispose()
    assert sorted(ran, key=int) == [str(n) for n in range(backlog)]  # each once
