"""The alerts' work in the background: posting an alert group's thread and its updates
(the outbox's ``alert.post``, by ``AlertPublisher.post``); the built-in detectors
judging each queue's counts right after the reads write them down (the scheduler's
``queue.sample``, ``services/reads/jobs.py``), in its transaction, the alert desk woken
after the commit when they raised an alert; and forgetting notifications processed more
than ``KEEP_PROCESSED`` ago (the scheduler's ``alert.forget``, hourly)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.alerts import detectors, store
from services.alerts.publish import AlertPublisher
from services.alerts.service import AlertDesk
from services.config.alerts import DetectorsConfig
from services.db.on_commit import on_commit
from services.estate.profile import QueueProfile
from services.outbox import Outbox
from services.reads.jobs import AfterSample
from services.scheduler import Scheduler, SharedDeps

FORGET = "alert.forget"
FORGET_EVERY = timedelta(hours=1)


class Deps(SharedDeps, Protocol):
    @property
    def alerts(self) -> AlertDesk: ...

    @property
    def alert_posts(self) -> AlertPublisher: ...

    @property
    def detectors(self) -> DetectorsConfig: ...

    @property
    def after_sample(self) -> AfterSample: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """The posts; where the periodic jobs run, the detectors and the forgetting (each run
    of it schedules the next)."""
    outbox.register(store.ALERT_POST, deps.alert_posts.post)
    if not deps.one_database:
        return
    desk, config = deps.alerts, deps.detectors

    async def judge(conn: AsyncConnection, profile: QueueProfile, now: datetime) -> None:
        verdicts = await detectors.judge(conn, profile=profile, config=config, now=now)
        raised = await detectors.raise_changes(
            conn, queue=profile.queue, verdicts=verdicts, now=now, counter=desk.firings
        )
        if not raised:
            return

        async def wake() -> None:
            desk.wake()

        on_commit(conn, wake)

    async def forget(conn: AsyncConnection, subject: str, now: datetime) -> None:
        await store.forget_processed(conn, before=now - store.KEEP_PROCESSED)
        await scheduler.schedule(
            conn, kind=FORGET, subject=subject, due_at=now + FORGET_EVERY, created_at=now
        )

    async def first(conn: AsyncConnection, now: datetime) -> None:
        await scheduler.ensure(conn, kind=FORGET, subject="all", due_at=now + FORGET_EVERY)

    deps.after_sample.add(judge)
    sched.register(FORGET, forget)
    sched.on_start(first)
