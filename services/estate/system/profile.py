"""A preset's profile: its system's facts and reads (``base.SystemBase``) with the changes,
staged-redrive operations, triage and housekeeping report every preset shares."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.estate.model import Triage
from services.estate.profile import as_utc
from services.estate.system import triage
from services.estate.system.args import SystemArgs
from services.estate.system.changes import SystemChanges
from services.estate.system.plans import SystemPlanOps
from services.estate.system.report import SystemReport


class SystemProfile(SystemArgs):
    """What a preset's package subclasses, declaring its system's facts."""

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self.changes = SystemChanges(self)
        self.plan_ops = SystemPlanOps(self)
        self.housekeeping_report = SystemReport(self)

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        return await triage.triage(self, conn, now=now, since=since, job_type=job_type, exact=exact)

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        t = await self.tables(conn)
        query = triage.oldest_pending(self, t, self.scope(t))
        return as_utc((await conn.execute(query)).scalar_one())
