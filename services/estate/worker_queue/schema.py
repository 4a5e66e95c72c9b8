"""The worker_queue vocabulary the reads and the writes share."""

from __future__ import annotations

FAILURE_REASONS = (
    "implementation_error",
    "timeout",
    "stale_duplicate",
    "spawn_oom",
    "spawn_ram",
    "mutex_collision",
    "other",
)
# A queued row of an issue that already has one of these is a duplicate.
ACTIVE = ("claimed", "running", "done")
