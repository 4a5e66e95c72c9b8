"""The outbox's work in the background: forgetting items done more than ``KEEP_DONE``
ago (the scheduler's ``outbox.forget``, hourly), but the newest of each (kind, subject)
a domain asked to keep (``Outbox.keep_newest``: the audit anchor post)."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.outbox import store
from services.outbox.relay import Outbox
from services.scheduler import FollowUp, Scheduler, SharedDeps

FORGET = "outbox.forget"
FORGET_EVERY = timedelta(hours=1)


def register(sched: Scheduler, outbox: Outbox, deps: SharedDeps) -> None:
    """Forgetting done items, every ``FORGET_EVERY``; each run schedules the next."""
    if not deps.one_database:
        return

    async def forget(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        kept = [store.newest(kind, of) for kind, of in outbox.kept_newest]
        await store.forget_done(
            conn, before=now - store.KEEP_DONE, spare=sa.or_(*kept) if kept else None
        )
        await scheduler.schedule(
            conn, kind=FORGET, subject=subject, due_at=now + FORGET_EVERY, created_at=now
        )
        return []

    async def first(conn: AsyncConnection, now: datetime) -> None:
        await scheduler.ensure(conn, kind=FORGET, subject="all", due_at=now + FORGET_EVERY)

    sched.register(FORGET, forget)
    sched.on_start(first)
