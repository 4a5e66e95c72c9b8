"""What a queue profile's triage is: one class per profile, in its package's
``triage.py``, implementing ``TriageReads``.

Every profile builds its triage the same way: the class is constructed with the
profile (``WorkerQueueTriage(profile)``, ``MessageJobTriage(profile)``,
``SystemTriage(profile)`` for every preset) and set as ``profile.triage_reads`` in the
profile's constructor, as ``changes`` and ``plan_ops`` are. ``QueueProfile.triage`` and
``QueueProfile.oldest_pending_at`` hand over to it, and the profile's ``stuck`` listing
selects its rows by the same ``stuck_where`` that triage counts them by.

Each method reads through the caller's connection and never writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.model import Triage
from services.estate.tables import BoundTable

# triage's by-type row of the jobs whose type column is NULL
NO_TYPE = "(no job type)"


class TriageReads(Protocol):
    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        """The queue's breakdowns. On a large PostgreSQL table the succeeded rows are
        estimated (``StatusCount.estimated``) unless ``exact``; every other count is
        exact (services/estate/estimate.py)."""
        ...

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        """When the oldest pending row was queued (None: nothing is pending), as triage
        reports it, in the one lookup triage makes for it (the gauges of GET /metrics)."""
        ...

    def stuck_where(
        self, tables: Mapping[str, BoundTable], now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        """The stuck rows at ``now``: triage counts them, ``/queue stuck`` lists them."""
        ...
