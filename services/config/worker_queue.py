"""worker_queue's own settings: the thresholds of the housekeeping it offers (the retry
worker's Parts A-F of the queue-failure runbook, services/estate/worker_queue/
housekeeping.py, their one reader); the runbook's values are the defaults.

A configuration file keeps them in its ``[housekeeping]`` table, where they have always
been, beside the keys of housekeeping itself: a file's shape is its users', so that
table's model (``HousekeepingConfig``, housekeeping.py) takes these keys over whole from
this one, validated here and refused under their ``housekeeping.`` names.
"""

from __future__ import annotations

import itertools
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

Minutes = Annotated[int, Field(ge=0, le=7 * 24 * 60)]


class WorkerQueueSettings(BaseModel):
    """``retry_backoff_minutes``: the wait before a failed row's 1st, 2nd, ... retry (the
    last value for every later one). ``stuck_claim_minutes``: a claimed row with no start
    and no heartbeat is released after this long. ``stale_duplicate_hours``: cancelled
    stale duplicates are deleted after this long. ``mutex_collision_minutes`` and
    ``spawn_ram_minutes``: the wait before those trivial failures run again.
    ``oom_threshold`` spawn_oom failures on one node within ``oom_window_minutes`` make
    it unavailable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retry_backoff_minutes: Annotated[list[Minutes], Field(min_length=1, max_length=10)] = Field(
        default_factory=lambda: [5, 15, 45]
    )
    stuck_claim_minutes: int = Field(default=15, ge=1, le=24 * 60)
    stale_duplicate_hours: int = Field(default=24, ge=1, le=24 * 365)
    mutex_collision_minutes: Minutes = 0
    spawn_ram_minutes: Minutes = 5
    oom_threshold: int = Field(default=3, ge=1, le=1000)
    oom_window_minutes: int = Field(default=30, ge=1, le=24 * 60)

    @model_validator(mode="after")
    def _growing(self) -> WorkerQueueSettings:
        steps = self.retry_backoff_minutes
        if any(later < earlier for earlier, later in itertools.pairwise(steps)):
            raise ValueError(
                f"retry_backoff_minutes {steps} must not shrink from one retry to the next, "
                "e.g. [5, 15, 45]"
            )
        return self

    def backoff(self, retry: int) -> int:
        """Minutes to wait before retry number ``retry`` (1-based)."""
        steps = self.retry_backoff_minutes
        return steps[min(max(retry, 1), len(steps)) - 1]
