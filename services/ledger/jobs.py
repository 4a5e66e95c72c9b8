"""The ledger's work in the background: forgetting delivery keys done and answered more
than ``KEEP`` ago (the scheduler's ``deliveries.forget``, hourly)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from services import ledger, scheduler
from services.outbox import Outbox
from services.scheduler import FollowUp, Scheduler, SharedDeps

# The name the kind had when one job also forgot the outbox's and the alert inbox's rows:
# kept, so the item a database already holds goes on being run.
FORGET = "deliveries.forget"
FORGET_EVERY = timedelta(hours=1)


def register(sched: Scheduler, outbox: Outbox, deps: SharedDeps) -> None:
    """Forgetting old keys, every ``FORGET_EVERY``; each run schedules the next."""
    if not deps.one_database:
        return

    async def forget(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        await ledger.forget(conn, before=now - ledger.KEEP)
        await scheduler.schedule(
            conn, kind=FORGET, subject=subject, due_at=now + FORGET_EVERY, created_at=now
        )
        return []

    async def first(conn: AsyncConnection, now: datetime) -> None:
        await scheduler.ensure(conn, kind=FORGET, subject="all", due_at=now + FORGET_EVERY)

    sched.register(FORGET, forget)
    sched.on_start(first)
