"""A staged redrive's wave, tallied the same way on every profile: each of its rows by
the canonical state of its status, as ``PlanOps.wave_status`` reports it."""

from __future__ import annotations

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
    where it was cancelled. Any other row is still open, and so is its job."""

    def __init__(self, profile: QueueProfile) -> None:
        self._canonical = profile.canonical
        self._dead = frozenset(profile.dead_letter_statuses)
        self.terminal = 0
        self.open = 0
        self.redead: list[tuple[str, str | None]] = []
        self.succeeded: list[str] = []
        self.open_jobs: list[str] = []

    def add(self, job: str, status: str, error: str | None) -> bool:
        """Count one row of ``job``; whether it is dead again."""
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
        signatures: dict[str, str] | None = None,
        earlier_signatures: dict[str, str] | None = None,
    ) -> WaveStatus:
        """The tally as the plan engine takes it (``WaveStatus`` says what the
        signatures are)."""
        return WaveStatus(
            terminal=self.terminal,
            open=self.open,
            redead=self.redead,
            succeeded=self.succeeded,
            open_jobs=self.open_jobs,
            signatures=signatures or {},
            earlier_signatures=earlier_signatures or {},
        )
