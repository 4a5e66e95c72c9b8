"""A staged redrive's view (``PlanView``) as its store gives it, for the tests of what a
plan's messages say: its counts are its waves' sums."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.plans.model import PlanState, PlanView, Wave

AT = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def plan_view(state: PlanState, waves: list[Wave], schedule: list[int], **fields: Any) -> PlanView:
    """P-1 of CR-1 on queue clips, asked by alice and approved by bob, updated at ``AT``,
    with its ``schedule`` of waves and the ``waves`` started; ``fields`` say otherwise."""
    values: dict[str, Any] = {
        "number": 1,
        "queue": "clips",
        "state": state,
        "request": 1,
        "reason": "OOM fix deployed",
        "requester": "alice",
        "approvers": ["bob"],
        "total": sum(schedule),
        "redriven": sum(w.changed for w in waves),
        "succeeded": sum(w.succeeded for w in waves),
        "redead": sum(w.redead for w in waves),
        "unknown": sum(w.unknown for w in waves),
        "schedule": schedule,
        "waves": waves,
        "note": None,
        "updated_at": AT,
    }
    return PlanView(**(values | fields))
