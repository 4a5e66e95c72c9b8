"""What housekeeping does on a preset's queue: it reports on the jobs running longer than
the queue's stuck_after_minutes and on the growth of the dead jobs, and never changes the
system's table (its own workers and rescuers own running jobs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.estate.housekeeping import HousekeepingReport

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase


class SystemReport(HousekeepingReport):
    def __init__(self, profile: SystemBase) -> None:
        self.system = profile.system
        self.closing = f"{profile.system} queues are reported on, never changed"
        self.described = (
            f"housekeeping: reports {profile.system} jobs running longer than the queue's "
            f"stuck_after_minutes and dead-job growth; never changes {profile.system}'s table"
        )

    def stuck_note(self, total: int, ids: str, minutes: int) -> str:
        return (
            f"{total} {self.system} job(s) running longer than {minutes} min (the queue's "
            f"stuck_after_minutes); {self.system}'s own rescue of stuck jobs handles them: {ids}"
        )

    def quiet_note(self, minutes: int) -> str:
        return f"no {self.system} job running longer than {minutes} min"
