"""The reads' work in the background: each configured queue's counts written down every
``sample_every`` (the scheduler's ``queue.sample``, one item per queue), and judged right
after by what the domains above registered with ``AfterSample`` (the alerts' detectors,
``services/alerts/jobs.py``), in the same transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.estate.estate import Estate
from services.estate.profile import QueueProfile
from services.outbox import Outbox
from services.reads import samples
from services.scheduler import FollowUp, Scheduler, SharedDeps

SAMPLE = "queue.sample"

# Judges a queue's sample just written, in its transaction; returns what runs after the
# commit.
Judge = Callable[[AsyncConnection, QueueProfile, datetime], Awaitable[list[FollowUp]]]


class AfterSample:
    """What judges each sample right after it is written: a domain above the reads (the
    alerts' detectors) adds its judge here, so the reads never import it."""

    def __init__(self) -> None:
        self.judges: list[Judge] = []

    def add(self, judge: Judge) -> None:
        self.judges.append(judge)


class Deps(SharedDeps, Protocol):
    @property
    def estate(self) -> Estate: ...

    @property
    def sample_every(self) -> timedelta: ...

    @property
    def after_sample(self) -> AfterSample: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """The samples, where the periodic jobs run; each queue's sample schedules its next."""
    if not deps.one_database:
        return
    estate, every, after = deps.estate, deps.sample_every, deps.after_sample

    async def sample(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        if subject not in estate.profiles:  # a queue removed from the config stops here
            return []
        profile = estate.profile(subject)
        await samples.record(conn, profile=profile, now=now)
        await scheduler.schedule(
            conn, kind=SAMPLE, subject=subject, due_at=now + every, created_at=now
        )
        follow_ups: list[FollowUp] = []
        for judge in after.judges:
            follow_ups += await judge(conn, profile, now)
        return follow_ups

    async def first(conn: AsyncConnection, now: datetime) -> None:
        for queue in estate.profiles:
            await scheduler.ensure(conn, kind=SAMPLE, subject=queue, due_at=now)

    sched.register(SAMPLE, sample)
    sched.on_start(first)
