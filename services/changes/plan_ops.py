"""What staged redrives need from each profile, beyond the guarded update itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import Selector, Target


@dataclass(frozen=True)
class ItemRef:
    """One plan item as the profile needs it: the job, its message, its state before."""

    job_id: str
    message_id: str | None
    original: dict[str, Any]


@dataclass(frozen=True)
class WaveStatus:
    terminal: int
    open: int
    redead: list[tuple[str, str | None]] = field(default_factory=list)  # (job, new error)
    succeeded: list[str] = field(default_factory=list)


class PlanOps(Protocol):
    has_sources: bool  # whether the estate names a source object per job (video_assets)

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        """Dead rows matching a bulk selector, newest first."""
        ...

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        """Jobs whose source object is gone, with why (empty where there is none)."""
        ...

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        """How many times each job was redriven before."""
        ...

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        """What a rollback must put back, read just before the rows are redriven: per
        message where the item names one, else per job."""
        ...

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus: ...

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        """Return redriven jobs nobody claimed yet to their dead state; the rolled back."""
        ...

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        """Remember redrives where the estate keeps no events of its own."""
        ...


def restored(column: str, value: Any) -> Any:
    """A value kept in a plan item's JSON, as the column takes it back: timestamps were
    stored as ISO text."""
    if isinstance(value, str) and column.endswith("_at"):
        return datetime.fromisoformat(value)
    return value
