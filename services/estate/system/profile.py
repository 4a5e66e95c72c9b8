"""A preset's profile: its system's facts (``base.SystemBase``) and reads (``reads.py``,
``args.py``) with the triage, changes, staged-redrive operations and housekeeping report
every preset shares."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.estate.system import dead_index
from services.estate.system.args import SystemArgs
from services.estate.system.changes import SystemChanges
from services.estate.system.plans import SystemPlanOps
from services.estate.system.report import SystemReport
from services.estate.system.triage import SystemTriage


class SystemProfile(SystemArgs):
    """What a preset's package subclasses, declaring its system's facts."""

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self.triage_reads = SystemTriage(self)
        self.changes = SystemChanges(self)
        self.plan_ops = SystemPlanOps(self)
        self.housekeeping_report = SystemReport(self)

    async def describe(self, conn: AsyncConnection) -> list[str]:
        """As every profile's, and whether the index on its dead jobs is there, where its
        system ships none that finds them (information: it is optional)."""
        lines = await super().describe(conn)
        return [*lines, *await dead_index.check_lines(conn, self, await self.tables(conn))]
