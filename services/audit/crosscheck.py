"""The state tables against the trail: what queuebot's own rows say happened must have its
audit events. A chain rewritten with the key (or a trail cut short) can hide events, but
the change requests, approvals and plans that those events recorded are still there.

- every change request: ``change.requested``; executed ones also ``change.approved``
  and ``change.executed``; rejected ``change.rejected``; expired ``change.expired``;
- every decision in ``qb_approvals``: its ``change.approved`` or ``change.rejected``
  event by the same person;
- every plan: ``plan.started`` and one ``plan.wave_started`` per wave in its ``waves``
  JSON; completed ``plan.completed``, rolled back ``plan.rolled_back``, halted
  ``plan.halted``, closed ``plan.closed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import Approval, ChangeRequest, Plan
from services.jsonable import loads

_requests = cast(sa.Table, ChangeRequest.__table__)
_approvals = cast(sa.Table, Approval.__table__)
_plans = cast(sa.Table, Plan.__table__)

_BY_REQUEST_STATE = {
    "executed": ("change.approved", "change.executed"),
    "rejected": ("change.rejected",),
    "expired": ("change.expired",),
}
_BY_PLAN_STATE = {
    "completed": ("plan.completed",),
    "rolled_back": ("plan.rolled_back",),
    "halted": ("plan.halted",),
    "closed": ("plan.closed",),
}
_DECISIONS = {"approve": "change.approved", "reject": "change.rejected"}
_SHOWN = 3

# (action, subject, detail): detail is the person of a decision, the number of a wave,
# or None for "an event of this action about this subject".
Need = tuple[str, str, str | None]


@dataclass
class Expected:
    """The events the state tables call for, crossed off as the walk meets them."""

    pending: dict[Need, None] = field(default_factory=dict)  # insertion order: reports
    records: int = 0
    _waves: set[str] = field(default_factory=set)  # plans with waves still to meet

    def need(self, need: Need) -> None:
        self.pending[need] = None
        if need[0] == "plan.wave_started":
            self._waves.add(need[1])

    def meet(self, row: sa.RowMapping) -> None:
        action, subject = row["action"], row["subject"]
        if subject is None:
            return
        self.pending.pop((action, subject, None), None)
        if action in ("change.approved", "change.rejected"):
            self.pending.pop((action, subject, row["actor_person"]), None)
        elif action == "plan.wave_started" and subject in self._waves:
            wave = loads(row["details"]).get("wave")
            self.pending.pop((action, subject, str(wave)), None)

    def problem(self) -> str | None:
        """One line naming the records whose events are missing, or None."""
        if not self.pending:
            return None
        missing = [_describe(n) for n in self.pending]
        return f"the state tables record what the audit trail does not: {_some(missing)}"


def mismatched(found: list[str]) -> str | None:
    """One line naming the rows that say otherwise than their events, or None."""
    if not found:
        return None
    return f"the state tables do not match the audit trail: {_some(found)}"


def _some(found: list[str]) -> str:
    """The first few, and how many more."""
    more = len(found) - _SHOWN
    return "; ".join(found[:_SHOWN]) + (f" (and {more} more)" if more > 0 else "")


def _describe(need: Need) -> str:
    action, subject, detail = need
    if action == "plan.wave_started":
        return f"{subject} wave {detail} has no {action} event"
    if detail is not None:
        return f"{subject}: {detail}'s decision in qb_approvals has no {action} event"
    return f"{subject} has no {action} event"


async def expected_trail(conn: AsyncConnection) -> Expected:
    """Read the state tables. Call this before walking the chain: a row committed by now
    was committed together with its events, so the walk that follows meets them."""
    expected = Expected()
    for number, state in await conn.execute(
        sa.select(_requests.c.id, _requests.c.state).order_by(_requests.c.id)
    ):
        subject = f"CR-{number}"
        expected.records += 1
        expected.need(("change.requested", subject, None))
        for action in _BY_REQUEST_STATE.get(state, ()):
            expected.need((action, subject, None))
    for number, person, decision in await conn.execute(
        sa.select(_approvals.c.request_id, _approvals.c.person, _approvals.c.decision).order_by(
            _approvals.c.id
        )
    ):
        expected.records += 1
        decided = _DECISIONS.get(decision)
        if decided is not None:
            expected.need((decided, f"CR-{number}", person))
    for number, state, waves in await conn.execute(
        sa.select(_plans.c.id, _plans.c.state, _plans.c.waves).order_by(_plans.c.id)
    ):
        subject = f"P-{number}"
        expected.records += 1
        expected.need(("plan.started", subject, None))
        for action in _BY_PLAN_STATE.get(state, ()):
            expected.need((action, subject, None))
        for wave in (waves or {}).get("waves", []):
            expected.need(("plan.wave_started", subject, str(wave.get("number"))))
    return expected
