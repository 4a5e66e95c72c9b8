"""queuebot's upkeep, run by the scheduler in a process whose queues and own tables share
one database: counting the queues (and the detectors judging the counts), forgetting old
delivery keys, done outbox items and processed alerts, posting the audit trail's head,
and the retry worker's periodic run. Each reschedules itself; the other domains register
their own kinds (services/*/jobs.py)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from services import ledger, outbox, scheduler
from services.alerts import detectors
from services.alerts import store as inbox
from services.alerts.service import AlertDesk
from services.audit import Actor
from services.audit.anchors import Anchors, newest_post
from services.config.alerts import DetectorsConfig
from services.db.on_commit import on_commit
from services.errors import QueuebotError
from services.estate.estate import Estate
from services.housekeeping.run import Housekeeper
from services.reads import samples
from services.scheduler import Scheduler

log = logging.getLogger("queuebot.housekeeping")
SAMPLE = "queue.sample"
FORGET = "deliveries.forget"
SAMPLE_EVERY = timedelta(minutes=1)
FORGET_EVERY = timedelta(hours=1)
ANCHOR = "audit.anchor"
ANCHOR_EVERY = timedelta(minutes=15)  # the head is posted after each change, and this often
HOUSEKEEP = "queue.housekeep"  # the retry worker's periodic run ([housekeeping] periodic)


def register(
    sched: Scheduler,
    *,
    estate: Estate,
    anchors: Anchors | None = None,
    alerts: AlertDesk | None = None,
    detect: DetectorsConfig | None = None,
    sample_every: timedelta = SAMPLE_EVERY,
    housekeeper: Housekeeper | None = None,
) -> None:
    """Give the scheduler the upkeep's handlers (each runs in the scheduler's transaction)
    and, at start, their first items. ``detect``: the built-in detectors judge each
    queue's counts right after they are written down, and raise their alerts at
    ``alerts``. ``housekeeper``: the retry worker, run periodically when its settings
    say so."""

    async def sample(conn: AsyncConnection, subject: str, now: datetime) -> None:
        if subject not in estate.profiles:  # a queue removed from the config stops here
            return
        profile = estate.profile(subject)
        await samples.record(conn, profile=profile, now=now)
        await scheduler.schedule(
            conn, kind=SAMPLE, subject=subject, due_at=now + sample_every, created_at=now
        )
        if alerts is None or detect is None:
            return
        verdicts = await detectors.judge(conn, profile=profile, config=detect, now=now)
        raised = await detectors.raise_changes(
            conn, queue=subject, verdicts=verdicts, now=now, counter=alerts.firings
        )
        if not raised:
            return

        async def wake() -> None:
            alerts.wake()

        on_commit(conn, wake)

    async def forget(conn: AsyncConnection, subject: str, now: datetime) -> None:
        await ledger.forget(conn, before=now - ledger.KEEP)
        await outbox.forget_done(conn, before=now - outbox.KEEP_DONE, spare=newest_post())
        await inbox.forget_processed(conn, before=now - inbox.KEEP_PROCESSED)
        await scheduler.schedule(
            conn, kind=FORGET, subject=subject, due_at=now + FORGET_EVERY, created_at=now
        )

    async def anchor(conn: AsyncConnection, subject: str, now: datetime) -> None:
        await scheduler.schedule(
            conn, kind=ANCHOR, subject=subject, due_at=now + ANCHOR_EVERY, created_at=now
        )
        if anchors is not None:
            await anchors.record(conn, now=now, only_if_moved=True)

    async def housekeep(conn: AsyncConnection, subject: str, now: datetime) -> None:
        """The next run is scheduled in the scheduler's transaction; this one runs right
        after it commits, as a run of its own (its webhook calls before its transaction,
        never inside one). A crash between the two skips one run: the next comes at its
        time, and the runs' guards make any run finish what an earlier one left."""
        if housekeeper is None or not housekeeper.config.periodic:  # turned off since
            return
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

        on_commit(conn, run_now)

    async def first(conn: AsyncConnection, now: datetime) -> None:
        for queue in estate.profiles:
            await scheduler.ensure(conn, kind=SAMPLE, subject=queue, due_at=now)
        await scheduler.ensure(conn, kind=FORGET, subject="all", due_at=now + FORGET_EVERY)
        await scheduler.ensure(conn, kind=ANCHOR, subject="all", due_at=now + ANCHOR_EVERY)
        if housekeeper is not None and housekeeper.config.periodic:
            await scheduler.ensure(conn, kind=HOUSEKEEP, subject="all", due_at=now)

    sched.register(SAMPLE, sample)
    sched.register(HOUSEKEEP, housekeep)
    sched.register(ANCHOR, anchor)
    sched.register(FORGET, forget)
    sched.on_start(first)
