"""One queue's gauges at a moment: rows by status and by canonical state, failed rows by
failure reason, the failed rows someone should look at, dead letters and the oldest
pending row. ``GET /metrics`` serves them and the periodic queue sample stores them.

Three statements, each answered from the profile's recommended indexes: the status
counts, the failure reasons of failed rows (where the queue keeps a failure reason) and
the oldest pending row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.model import CanonicalState
from services.estate.profile import QueueProfile

# Failure reasons of a failed row that a person should act on: the job itself broke
# (implementation_error), ran out of time (timeout) or of memory at spawn (spawn_oom).
# The other reasons settle by themselves (a stale duplicate, a lock held elsewhere) or
# are the host's (spawn_ram, other).
ACTIONABLE_REASONS = ("timeout", "implementation_error", "spawn_oom")
# States a row ends in: once there it no longer moves by itself.
TERMINAL_STATES = (
    CanonicalState.SUCCEEDED,
    CanonicalState.FAILED,
    CanonicalState.DEAD,
    CanonicalState.CANCELLED,
)


@dataclass(frozen=True)
class QueueSnapshot:
    """A queue's gauges as read at ``taken_at``. ``by_reason`` and ``failed_actionable``
    are None where the queue keeps no failure reason."""

    queue: str
    taken_at: datetime
    by_status: Mapping[str, int]
    by_state: Mapping[CanonicalState, int]  # every canonical state, 0 where none
    dead_letters: int
    oldest_pending_at: datetime | None
    by_reason: Mapping[str, int] | None = None
    failed_actionable: int | None = None

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def pending(self) -> int:
        return self.by_state[CanonicalState.PENDING]

    @property
    def terminal(self) -> int:
        """Rows in a state they end in (succeeded, failed, dead, cancelled)."""
        return sum(self.by_state[s] for s in TERMINAL_STATES)

    @property
    def oldest_pending_age(self) -> float | None:
        """Seconds the oldest pending row had waited when the snapshot was taken."""
        if self.oldest_pending_at is None:
            return None
        return max(0.0, (self.taken_at - self.oldest_pending_at).total_seconds())

    def detail(self) -> dict[str, Any]:
        """What the periodic sample keeps beside its totals, as JSON: enough to tell,
        between two samples, whether actionable failures stayed high and whether rows
        arrived (total grew) while none finished (terminal states flat)."""
        return {
            "failed_actionable": self.failed_actionable,
            "by_reason": dict(self.by_reason) if self.by_reason is not None else None,
            "oldest_pending_at": (
                self.oldest_pending_at.isoformat() if self.oldest_pending_at else None
            ),
            "by_state": {state.value: n for state, n in self.by_state.items()},
        }


async def snapshot(conn: AsyncConnection, *, profile: QueueProfile, now: datetime) -> QueueSnapshot:
    """Read one queue's gauges (``conn`` reaches the queue's tables)."""
    counts = await profile.status_counts(conn)
    reasons = await profile.failure_reason_counts(conn)
    oldest = await profile.oldest_pending_at(conn)
    by_state = dict.fromkeys(CanonicalState, 0)
    for status, n in counts.items():
        by_state[profile.canonical(status)] += n
    actionable = None
    if reasons is not None:
        actionable = sum(reasons.get(reason, 0) for reason in ACTIONABLE_REASONS)
    return QueueSnapshot(
        queue=profile.queue,
        taken_at=now,
        by_status=counts,
        by_state=by_state,
        dead_letters=profile.dead_count(counts),
        oldest_pending_at=oldest,
        by_reason=reasons,
        failed_actionable=actionable,
    )
