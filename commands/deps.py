"""What handlers depend on, as interfaces, so unit tests can pass fakes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from services.config import AccessConfig
from services.estate.model import DeadFilter, DuplicateGroup, JobDetail, JobList, Triage
from services.people import Directory


class QueueReader(Protocol):
    """The read side of the queue estate (``services.queue_reads.QueueReads``)."""

    @property
    def queue_names(self) -> list[str]: ...

    async def triage(
        self, *, queue: str | None, since: timedelta | None, job_type: str | None
    ) -> Triage: ...

    async def show_job(self, *, queue: str | None, job_id: str) -> JobDetail: ...

    async def list_dead(self, *, queue: str | None, filters: DeadFilter) -> JobList: ...

    async def list_stuck(self, *, queue: str | None, limit: int) -> JobList: ...

    async def list_duplicates(self, *, queue: str | None, limit: int) -> list[DuplicateGroup]: ...


@dataclass(frozen=True)
class Deps:
    reads: QueueReader
    directory: Directory
    access: AccessConfig
