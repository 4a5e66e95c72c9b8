"""The change requests' work in the background: a request nobody decided expires at its
time (the scheduler's ``change.expire``, every 30 seconds, with its audit event)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.audit import AuditTrail
from services.changes import store
from services.outbox import Outbox
from services.scheduler import FollowUp, Scheduler, SharedDeps

EXPIRE = "change.expire"
EXPIRE_EVERY = timedelta(seconds=30)


class Deps(SharedDeps, Protocol):
    @property
    def audit(self) -> AuditTrail: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """Expiry, where the periodic jobs run, every ``EXPIRE_EVERY``; each run schedules the
    next."""
    if not deps.one_database:
        return
    audit = deps.audit

    async def expire(conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        await store.expire_due(conn, now=now, audit=audit)
        await scheduler.schedule(
            conn, kind=EXPIRE, subject=subject, due_at=now + EXPIRE_EVERY, created_at=now
        )
        return []

    async def first(conn: AsyncConnection, now: datetime) -> None:
        await scheduler.ensure(conn, kind=EXPIRE, subject="all", due_at=now)

    sched.register(EXPIRE, expire)
    sched.on_start(first)
