"""Read-only queue operations: triage, show, dead letters, stuck rows, duplicates."""

from __future__ import annotations

from datetime import timedelta

from services.estate.estate import Estate
from services.estate.model import DeadFilter, DuplicateGroup, JobDetail, JobList, Triage

MAX_LIST = 200


class QueueReads:
    """Each read opens one connection to the estate and closes it."""

    def __init__(self, estate: Estate) -> None:
        self.estate = estate

    @property
    def queue_names(self) -> list[str]:
        return list(self.estate.profiles)

    async def triage(
        self,
        *,
        queue: str | None = None,
        since: timedelta | None = None,
        job_type: str | None = None,
    ) -> Triage:
        profile = self.estate.profile(queue)
        now = self.estate.clock()
        async with self.estate.connect() as conn:
            return await profile.triage(
                conn, now=now, since=now - since if since else None, job_type=job_type
            )

    async def show_job(self, *, queue: str | None = None, job_id: str) -> JobDetail:
        profile = self.estate.profile(queue)
        async with self.estate.connect() as conn:
            return await profile.show(conn, job_id=job_id)

    async def list_dead(self, *, queue: str | None = None, filters: DeadFilter) -> JobList:
        profile = self.estate.profile(queue)
        async with self.estate.connect() as conn:
            return await profile.dead(conn, filters=filters)

    async def list_stuck(self, *, queue: str | None = None, limit: int = 50) -> JobList:
        profile = self.estate.profile(queue)
        async with self.estate.connect() as conn:
            return await profile.stuck(conn, now=self.estate.clock(), limit=min(limit, MAX_LIST))

    async def list_duplicates(
        self, *, queue: str | None = None, limit: int = 50
    ) -> list[DuplicateGroup]:
        profile = self.estate.profile(queue)
        async with self.estate.connect() as conn:
            return await profile.duplicates(conn, limit=min(limit, MAX_LIST))
