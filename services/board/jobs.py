"""The board's work in the background: every change worth showing asks for a refresh in
its own transaction (on the audit trail's appends), the outbox delivers the refreshes
(``board.refresh``) where a process shows the board, and the scheduler asks for one every
``RECOUNT_EVERY`` (``board.recount``: the dead letters move without queuebot)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.audit import AuditTrail
from services.board.publish import (
    RECOUNT,
    RECOUNT_EVERY,
    REFRESH,
    BoardPublisher,
    on_events,
    refresh_now,
)
from services.outbox import Outbox
from services.scheduler import Scheduler, SharedDeps


class Deps(SharedDeps, Protocol):
    @property
    def audit(self) -> AuditTrail: ...

    @property
    def boards(self) -> BoardPublisher | None:
        """None: the board is shown nowhere (no Slack App Home, no Discord board)."""
        ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """Refreshes asked for by every process that may change what a board shows; delivered
    and recounted by those that show it (its surfaces: serve and its worker)."""
    boards = deps.boards
    if boards is None:
        return
    deps.audit.on_append(on_events)
    boards.wake = outbox.wake
    if not boards.surfaces:
        return
    outbox.register(REFRESH, boards.post)

    async def recount(conn: AsyncConnection, subject: str, now: datetime) -> None:
        await refresh_now(conn, now)
        await scheduler.schedule(
            conn, kind=RECOUNT, subject=subject, due_at=now + RECOUNT_EVERY, created_at=now
        )

    async def first(conn: AsyncConnection, now: datetime) -> None:
        await scheduler.ensure(conn, kind=RECOUNT, subject="all", due_at=now + RECOUNT_EVERY)

    sched.register(RECOUNT, recount)
    sched.on_start(first)
