"""The worker_queue vocabulary the reads and the writes share."""

from __future__ import annotations

from services.estate.model import CanonicalState

FAILURE_REASONS = (
    "implementation_error",
    "timeout",
    "stale_duplicate",
    "spawn_oom",
    "spawn_ram",
    "mutex_collision",
    "other",
)
QUEUED = "queued"  # what a requeue or a redrive writes (and a rollback finds)
CANCELLED = "cancelled"  # what a cancel writes
CLAIMED = "claimed"  # taken by a worker that has not started it yet
# A queued row of an issue that already has a row in one of these states is a duplicate.
ACTIVE = (CanonicalState.IN_FLIGHT, CanonicalState.SUCCEEDED)
