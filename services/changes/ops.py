"""The interface each profile's change operations implement."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import Applied, ChangeKind, Frozen, Selector, Target


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
