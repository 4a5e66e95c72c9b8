"""Housekeeping's work in the background: the retry worker's periodic run (the
scheduler's ``queue.housekeep``, where ``[housekeeping] periodic`` says so). Each run
schedules the next."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.audit import Actor
from services.db.on_commit import on_commit
from services.errors import QueuebotError
from services.housekeeping.run import Housekeeper
from services.outbox import Outbox
from services.scheduler import Scheduler, SharedDeps

log = logging.getLogger("queuebot.housekeeping")
HOUSEKEEP = "queue.housekeep"  # the retry worker's periodic run ([housekeeping] periodic)


class Deps(SharedDeps, Protocol):
    @property
    def housekeeper(self) -> Housekeeper | None:
        """The retry worker (None where the queue is in another database)."""
        ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """Give the scheduler the periodic run's handler (it runs in the scheduler's
    transaction) and, at start, its first item when its settings ask for it."""
    if not deps.one_database:
        return
    housekeeper = deps.housekeeper

    async def housekeep(conn: AsyncConnection, subject: str, now: datetime) -> None:
        """The next run is scheduled in the scheduler's transaction; this one runs right
        after it commits, as a run of its own (its webhook calls before its transaction,
        never inside one). A crash between the two skips one run: the next comes at its
        time, and the runs' guards make any run finish what an earlier one left."""
        if housekeeper is None or not housekeeper.config.periodic:  # turned off since
            return
        runner = housekeeper  # not None, for the closure below
        every = timedelta(minutes=runner.config.every_minutes)
        await scheduler.schedule(
            conn, kind=HOUSEKEEP, subject=subject, due_at=now + every, created_at=now
        )

        async def run_now() -> None:
            try:
                await runner.run(actor=Actor.system("housekeeping"))
            except QueuebotError as exc:  # a queue's setup, the database: one line
                log.error(
                    "periodic housekeeping did not run: %s (the next run is in %d min)",
                    exc.message,
                    runner.config.every_minutes,
                )
            except Exception:
                log.exception(
                    "periodic housekeeping failed (the next run is in %d min)",
                    runner.config.every_minutes,
                )

        on_commit(conn, run_now)

    async def first(conn: AsyncConnection, now: datetime) -> None:
        if housekeeper is not None and housekeeper.config.periodic:
            await scheduler.ensure(conn, kind=HOUSEKEEP, subject="all", due_at=now)

    sched.register(HOUSEKEEP, housekeep)
    sched.on_start(first)
