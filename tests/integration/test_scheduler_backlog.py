"""A backlog of due items is worked off at once: a full pass of ``run_forever`` goes
straight on to the next, not to sleep for its interval (reminders and deadlines that
come due together are not held back a second per hundred). Items of a batch kind are
fired many in one transaction, and still exactly once: a failing one is retried alone,
two schedulers share a backlog without firing anything twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import scheduler
from services.db import create_engine
from services.db.migrate import upgrade
from services.scheduler import Due, FollowUp, Scheduler

DAY = timedelta(days=1)


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


async def _backlog(engine: AsyncEngine, kind: str, count: int, now: datetime) -> None:
    async with engine.begin() as conn:
        for n in range(count):
            await scheduler.schedule(
                conn,
                kind=kind,
                subject=str(n),
                due_at=now - timedelta(seconds=count - n),
                created_at=now,
            )


async def _scheduled(engine: AsyncEngine, kind: str) -> list[tuple[str, int, str | None]]:
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                "SELECT subject, attempts, last_error FROM qb_schedule WHERE kind = :kind "
                "ORDER BY subject"
            ),
            {"kind": kind},
        )
        return [(str(s), int(a), e) for s, a, e in found]


async def test_a_failing_item_of_a_batch_is_retried_alone_and_the_others_fire_once(
    db_url: str,
) -> None:
    """Fifty items of a batch kind are due; the handler fails on one of them. The batch
    is rolled back and its items run one by one: the other 49 fire once (their changes
    committed once, their follow-ups run once), the bad one is kept with its error and
    retried later, not dropped and not fired."""
    engine = create_engine(db_url)
    await upgrade(engine)
    now = datetime.now(UTC)
    await _backlog(engine, "test.batch", 50, now)
    posted: list[str] = []
    attempts: list[int] = []

    async def fire(conn: AsyncConnection, items: Sequence[Due], at: datetime) -> list[FollowUp]:
        attempts.append(len(items))
        for item in items:
            if item.subject == "13":
                raise RuntimeError("item 13 is broken")
            # a change in the batch's transaction: what a rollback must take back
            await scheduler.schedule(
                conn, kind="test.done", subject=item.subject, due_at=at + DAY, created_at=at
            )

        async def post() -> None:
            posted.extend(item.subject for item in items)

        return [post]

    sched = Scheduler(engine=engine, clock=lambda: datetime.now(UTC))
    sched.register_batch(["test.batch"], fire)
    try:
        assert await sched.run_due() == 50
        assert attempts[0] > 1  # they were claimed together first
        assert await sched.run_due() == 0  # the bad one waits for its back-off
        others = [str(n) for n in range(50) if n != 13]
        assert sorted(posted, key=int) == others  # each once
        assert [s for s, _, _ in await _scheduled(engine, "test.done")] == sorted(others)
        assert await _scheduled(engine, "test.batch") == [
            ("13", 1, "RuntimeError: item 13 is broken")
        ]
    finally:
        await engine.dispose()


async def test_items_run_earliest_first_across_batch_and_single_kinds(db_url: str) -> None:
    """A single item due before a batch runs before it, one due after it runs after it;
    every item runs once."""
    engine = create_engine(db_url)
    await upgrade(engine)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        for kind, subject, ago in (
            ("test.single", "early", 30),
            ("test.batch", "a", 20),
            ("test.batch", "b", 19),
            ("test.single", "late", 10),
            ("test.batch", "c", 5),
        ):
            await scheduler.schedule(
                conn,
                kind=kind,
                subject=subject,
                due_at=now - timedelta(seconds=ago),
                created_at=now,
            )
    ran: list[str] = []

    async def single(conn: AsyncConnection, subject: str, at: datetime) -> list[FollowUp]:
        ran.append(subject)
        return []

    async def batch(conn: AsyncConnection, items: Sequence[Due], at: datetime) -> list[FollowUp]:
        ran.append("+".join(item.subject for item in items))
        return []

    sched = Scheduler(engine=engine, clock=lambda: datetime.now(UTC))
    sched.register("test.single", single)
    sched.register_batch(["test.batch"], batch)
    try:
        assert await sched.run_due() == 5
        # the batch takes the batch items due by now with it, the later "c" too
        assert ran == ["early", "a+b+c", "late"]
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_two_schedulers_fire_a_backlog_of_batches_once(pg_url: str) -> None:
    """Two schedulers, each with an engine of its own, on one PostgreSQL database work
    off 1,000 due items of a batch kind together: each fires once, by one of them."""
    engines = [create_engine(pg_url), create_engine(pg_url)]
    await upgrade(engines[0])
    now = datetime.now(UTC)
    await _backlog(engines[0], "test.batch", 1000, now)
    fired: Counter[str] = Counter()
    by: Counter[int] = Counter()

    def firing(number: int) -> Callable[..., Awaitable[list[FollowUp]]]:
        async def fire(conn: AsyncConnection, items: Sequence[Due], at: datetime) -> list[FollowUp]:
            for item in items:
                await scheduler.schedule(
                    conn, kind="test.done", subject=item.subject, due_at=at + DAY, created_at=at
                )

            async def count() -> None:
                fired.update(item.subject for item in items)
                by[number] += len(items)

            return [count]

        return fire

    scheds = []
    for number, engine in enumerate(engines):
        sched = Scheduler(engine=engine, clock=lambda: datetime.now(UTC))
        sched.register_batch(["test.batch"], firing(number))
        scheds.append(sched)
    try:
        ran = await asyncio.gather(*(s.run_due(limit=10_000) for s in scheds))
        assert sum(ran) == 1000
        assert fired == Counter({str(n): 1 for n in range(1000)})
        assert len(await _scheduled(engines[0], "test.done")) == 1000
        assert await _scheduled(engines[0], "test.batch") == []
        assert by[0] and by[1], by  # both took a share
    finally:
        for engine in engines:
            await engine.dispose()
