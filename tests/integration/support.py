"""Test support: a shop (migrated database + demo estate + services) and a clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from services.changes.requests import ChangeRequests
from services.config import ApprovalConfig
from services.estate.demo import DemoEstate
from services.estate.estate import Estate
from services.queue_reads import QueueReads

START = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@dataclass
class Shop:
    engine: AsyncEngine
    estate: Estate
    reads: QueueReads
    changes: ChangeRequests
    demo: DemoEstate
    clock: Clock = field(default_factory=Clock)

    def with_approval(self, approval: ApprovalConfig) -> ChangeRequests:
        return ChangeRequests(
            estate=self.estate, state_engine=self.engine, approval=approval, clock=self.clock
        )
