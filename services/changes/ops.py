"""The interface each profile's change operations implement."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import Applied, ChangeKind, Frozen, Selector, Target
from services.estate.message_job import MessageJobProfile
from services.estate.profile import QueueProfile
from services.estate.worker_queue import WorkerQueueProfile


class ChangeOps(Protocol):
    async def freeze(
        self, conn: AsyncConnection, *, kind: ChangeKind, selector: Selector
    ) -> Frozen:
        """Find the target rows, decide eligibility and snapshot them. Read-only."""
        ...

    async def apply(
        self,
        conn: AsyncConnection,
        *,
        kind: ChangeKind,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        """Change exactly the targets still in their snapshotted state, set-based, inside
        the caller's transaction; report the rest as skipped."""
        ...


def changes_for(profile: QueueProfile) -> ChangeOps:
    """The change operations of a queue's profile."""
    from services.changes.message_job import MessageJobChanges
    from services.changes.worker_queue import WorkerQueueChanges

    if isinstance(profile, WorkerQueueProfile):
        return WorkerQueueChanges(profile)
    if isinstance(profile, MessageJobProfile):
        return MessageJobChanges(profile)
    raise TypeError(f"no change operations for profile {profile.name}")
