"""The periodic jobs every queuebot process keeps scheduled: counting the queues, expiring
change requests, forgetting old delivery keys. Each reschedules itself."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import ledger, outbox, samples, scheduler
from services.alerts import detectors
from services.alerts import store as inbox
from services.alerts.service import AlertDesk
from services.audit import Actor, AuditTrail
from services.audit.anchors import Anchors
from services.changes import store as requests
from services.config.alerts import DetectorsConfig
from services.errors import QueuebotError
from services.estate.estate import Estate
from services.housekeeping.run import Housekeeper
from services.plans import store as plan_store
from services.plans.engine import PlanEngine
from services.plans.store import TICK
from services.scheduler import FollowUp, Scheduler

log = logging.getLogger("queuebot.housekeeping")
SAMPLE = "queue.sample"
EXPIRE = "change.expire"
FORGET = "deliveries.forget"
SAMPLE_EVERY = timedelta(minutes=1)
EXPIRE_EVERY = timedelta(seconds=30)
FORGET_EVERY = timedelta(hours=1)
ANCHOR = "audit.anchor"
ANCHOR_EVERY = timedelta(minutes=15)  # the head is posted after each change, and this often
HOUSEKEEP = "queue.housekeep"  # the retry worker's periodic run ([housekeeping] periodic)


def register(
    sched: Scheduler,
    *,
    estate: Estate,
    plans: PlanEngine,
    audit: AuditTrail,
    anchors: Anchors | None = None,
    alerts: AlertDesk | None = None,
    detect: DetectorsConfig | None = None,
    sample_every: timedelta = SAMPLE_EVERY,
    housekeeper: Housekeeper | None = None,
) -> None:
    """Give the scheduler its handlers: each runs in the scheduler's transaction.
    ``detect``: the built-in detectors judge each queue's counts right after they are
    written down, and raise their alerts at ``alerts``."""

    async def sample(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        if subject not in estate.profiles:  # a queue removed from the config stops here
            return []
        profile = estate.profile(subject)
        await samples.record(conn, profile=profile, now=now)
        await scheduler.schedule(
            conn, kind=SAMPLE, subject=subject, due_at=now + sample_every, created_at=now
        )
        if alerts is None or detect is None:
            return []
        verdicts = await detectors.judge(conn, profile=profile, config=detect, now=now)
        raised = await detectors.raise_changes(
            conn, queue=subject, verdicts=verdicts, now=now, counter=alerts.firings
        )
        if not raised:
            return []

        async def wake() -> None:
            alerts.wake()

        return [wake]

    async def expire(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        await requests.expire_due(conn, now=now, audit=audit)
        await scheduler.schedule(
            conn, kind=EXPIRE, subject=subject, due_at=now + EXPIRE_EVERY, created_at=now
        )
        return []

    async def forget(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        await ledger.forget(conn, before=now - ledger.KEEP)
        await outbox.forget_done(conn, before=now - outbox.KEEP_DONE)
        await inbox.forget_processed(conn, before=now - inbox.KEEP_PROCESSED)
        await scheduler.schedule(
            conn, kind=FORGET, subject=subject, due_at=now + FORGET_EVERY, created_at=now
        )
        return []

    async def anchor(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        await scheduler.schedule(
            conn, kind=ANCHOR, subject=subject, due_at=now + ANCHOR_EVERY, created_at=now
        )
        if anchors is None:
            return []
        kick = await anchors.record(conn, now=now, only_if_moved=True)
        return [kick] if kick else []

    async def housekeep(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        """The next run is scheduled in the scheduler's transaction; this one runs right
        after it commits, as a run of its own (its webhook calls before its transaction,
        never inside one). A crash between the two skips one run: the next comes at its
        time, and the runs' guards make any run finish what an earlier one left."""
        if housekeeper is None or not housekeeper.config.periodic:  # turned off since
            return []
        keeper = housekeeper
        every = timedelta(minutes=keeper.config.every_minutes)
        await scheduler.schedule(
            conn, kind=HOUSEKEEP, subject=subject, due_at=now + every, created_at=now
        )

        async def run_now() -> None:
            try:
                await keeper.run(actor=Actor.system("housekeeping"))
            except QueuebotError as exc:  # a queue's setup, the database: one line
                log.error(
                    "periodic housekeeping did not run: %s (the next run is in %d min)",
                    exc.message,
                    keeper.config.every_minutes,
                )
            except Exception:
                log.exception(
                    "periodic housekeeping failed (the next run is in %d min)",
                    keeper.config.every_minutes,
                )

        return [run_now]

    sched.register(SAMPLE, sample)
    sched.register(HOUSEKEEP, housekeep)
    sched.register(ANCHOR, anchor)
    sched.register(EXPIRE, expire)
    sched.register(FORGET, forget)
    sched.register(TICK, plans.tick)


async def seed(
    engine: AsyncEngine,
    *,
    estate: Estate,
    clock: Callable[[], datetime],
    housekeep_every: timedelta | None = None,
) -> None:
    """Make sure the periodic jobs exist (a no-op when another replica made them);
    ``housekeep_every``: the retry worker runs this often (None: not in this process)."""
    now = clock()
    async with engine.begin() as conn:
        for queue in estate.profiles:
            await scheduler.ensure(conn, kind=SAMPLE, subject=queue, due_at=now)
        await scheduler.ensure(conn, kind=EXPIRE, subject="all", due_at=now)
        await scheduler.ensure(conn, kind=FORGET, subject="all", due_at=now + FORGET_EVERY)
        await scheduler.ensure(conn, kind=ANCHOR, subject="all", due_at=now + ANCHOR_EVERY)
        if housekeep_every is not None:
            await scheduler.ensure(conn, kind=HOUSEKEEP, subject="all", due_at=now)
        # A halted plan counts the rows it redrove until none is out; a plan halted by an
        # earlier version lost its tick at the halt. Its tick, where it has none: one that
        # finds nothing out stops.
        for plan in await plan_store.halted(conn):
            await scheduler.ensure(conn, kind=TICK, subject=str(plan), due_at=now)
