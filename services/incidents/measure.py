"""Measuring an incident's validation items: the counts written down (queuebot's tables),
what the incident put back, and the queue as it is now (read on the estate), taken
before ``/incident validate`` records the verdicts in its own transaction.

Without an estate to read (a process that runs no queues) the backlog is judged by the
newest count written down, and the items that need the queue's rows are not measured.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import reading
from services.estate.estate import Estate
from services.incidents import checks, put_back, redrive_checks
from services.incidents.checks import Count, Verdict
from services.incidents.model import IncidentView
from services.reads import gauges


class Measure:
    def __init__(
        self, *, engine: AsyncEngine, estate: Estate | None, alert_threshold: int | None
    ) -> None:
        """``alert_threshold``: the FailedJobsAccumulating alert's threshold of failed
        rows with an actionable reason (None: there is none to hold them to)."""
        self.engine = engine
        self.estate = estate
        self.alert_threshold = alert_threshold

    async def verdicts(
        self, view: IncidentView, *, queue: str, now: datetime, wanted: Collection[str]
    ) -> dict[str, Verdict]:
        """The verdict of each check in ``wanted`` (``checks.MEASURED``) on ``queue`` now."""
        found: dict[str, Verdict] = {}
        if not wanted:
            return found
        async with reading(self.engine) as conn:
            put = await put_back.of(conn, view.name, queue)
            if "count-restored" in wanted:
                before = view.fault_at or view.declared_at
                found["count-restored"] = await checks.count_restored(
                    conn, queue=queue, before=before, now=now
                )
            earlier = await checks.count_at(conn, queue, now - checks.BACKLOG_WINDOW)
            standing = None if put.first is None else await checks.count_at(conn, queue, put.first)
            declared = await checks.count_at(conn, queue, view.declared_at)
            newest = await checks.count_at(conn, queue, now)
        taken = await self._taken(queue, now)
        current = (
            newest if taken is None else Count(now, taken.total, taken.pending, taken.dead_letters)
        )
        if "backlog-falling" in wanted and current is None:
            found["backlog-falling"] = Verdict(None, f"no count of {queue} was written down yet")
        elif "backlog-falling" in wanted and current is not None:
            found["backlog-falling"] = checks.backlog_falling(
                queue=queue,
                current=current,
                earlier=earlier,
                put_back=None if put.first is None else checks.PutBackAt(view.name, standing),
            )
        rows = {"redriven-succeeded", "dead-letters-low", "dead-letters-not-growing"}
        if rows.isdisjoint(wanted):
            return found
        if taken is None or self.estate is None:
            unread = Verdict(None, f"this queuebot process does not read {queue}'s rows")
            return found | {check: unread for check in rows & set(wanted)}
        profile = self.estate.profile(queue)
        if "dead-letters-low" in wanted:
            found["dead-letters-low"] = redrive_checks.dead_letters_low(
                queue=queue,
                taken=taken,
                threshold=self.alert_threshold,
                declared=declared,
                put=put,
            )
        async with self.estate.connect() as conn:
            if "redriven-succeeded" in wanted:
                found["redriven-succeeded"] = await redrive_checks.redriven_succeeded(
                    conn, profile=profile, put=put
                )
            if "dead-letters-not-growing" in wanted:
                found["dead-letters-not-growing"] = await redrive_checks.dead_letters_not_growing(
                    conn, profile=profile, put=put, now=now
                )
        return found

    async def _taken(self, queue: str, now: datetime) -> gauges.QueueSnapshot | None:
        """The queue's gauges now, where this process reads the queue."""
        if self.estate is None or queue not in self.estate.profiles:
            return None
        async with self.estate.connect() as conn:
            return await gauges.snapshot(conn, profile=self.estate.profile(queue), now=now)
