"""A staged redrive's wave, tallied the same way on every profile: each of its rows by
the canonical state of its status, and each of its jobs none of whose rows is in the table
any more by the queue's rule for such a job, as ``PlanOps.wave_status`` reports it."""

from __future__ import annotations

from collections.abc import Iterable

from services.estate.model import CanonicalState
from services.estate.ops import WaveStatus
from services.estate.profile import QueueProfile

# The states a redriven row does not leave again by itself: the wave is done with it.
TERMINAL = (
    CanonicalState.SUCCEEDED,
    CanonicalState.FAILED,
    CanonicalState.DEAD,
    CanonicalState.CANCELLED,
)


class WaveTally:
    """A wave's rows (the main table's: those the redrive put back), counted one by one.

    A row in a terminal state is finished: dead again where its status is a dead letter
    (``QueueProfile.dead_letter_statuses``), succeeded where its state is, and neither
    where it was cancelled. Any other row is still open, and so is its job. A job of the
    wave none of whose rows was counted has left the table: it succeeded where the queue's
    rule says so (``QueueProfile.deleted_jobs``), else its outcome is unknown."""

    def __init__(self, profile: QueueProfile) -> None:
        self._canonical = profile.canonical
        self._dead = frozenset(profile.dead_letter_statuses)
        self._gone_succeeded = profile.deleted_jobs.succeeded
        self._seen: set[str] = set()
        self.terminal = 0
        self.open = 0
        self.redead: list[tuple[str, str | None]] = []
        self.succeeded: list[str] = []
        self.open_jobs: list[str] = []

    def add(self, job: str, status: str, error: str | None) -> bool:
        """Count one row of ``job``; whether it is dead again."""
        self._seen.add(job)
        state = self._canonical(status)
        if state not in TERMINAL:
            self.open += 1
            self.open_jobs.append(job)
            return False
        self.terminal += 1
        if status in self._dead:
            self.redead.append((job, error))
            return True
        if state is CanonicalState.SUCCEEDED:
            self.succeeded.append(job)
        return False

    def status(
        self,
        *,
        jobs: Iterable[str],
        signatures: dict[str, str] | None = None,
        earlier_signatures: dict[str, str] | None = None,
    ) -> WaveStatus:
        """The tally as the plan engine takes it (``WaveStatus`` says what the
        signatures are); ``jobs``: the jobs of the rows that were looked for, those of them
        none of whose rows was counted being gone from the table."""
        gone = [job for job in dict.fromkeys(jobs) if job not in self._seen]
        return WaveStatus(
            terminal=self.terminal,
            open=self.open,
            redead=self.redead,
            succeeded=[*self.succeeded, *gone] if self._gone_succeeded else self.succeeded,
            unknown=[] if self._gone_succeeded else gone,
            open_jobs=self.open_jobs,
            signatures=signatures or {},
            earlier_signatures=earlier_signatures or {},
        )
