"""The jobs table's statuses, with the team's ``[statuses]`` mapped in: the message_job
reads of the jobs table go by them, as every read of the messages goes by the profile's
own ``statuses_in`` and ``canonical``."""

from __future__ import annotations

from services.estate.message_job.schema import JOB_STATES
from services.estate.model import CanonicalState
from services.estate.profile import QueueProfile


class JobStates:
    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile
        self.state_map = profile.mapped_states(JOB_STATES)

    def statuses_in(self, *states: CanonicalState) -> list[str]:
        """The jobs' statuses in these states that their status column can hold."""
        wanted = [status for status, state in self.state_map.items() if state in states]
        return self.profile.takes_statuses("jobs", "status", wanted)

    def canonical(self, status: str) -> CanonicalState:
        return self.state_map.get(status, CanonicalState.UNKNOWN)
