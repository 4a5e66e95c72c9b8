"""How many approvals a change request needs, and whether the people configured could
ever give them: a request nobody could approve is refused when it is asked for, not
left to expire (docs/decisions.md, "Quorum")."""

from __future__ import annotations

from collections.abc import Sequence

from services.changes.model import ChangeKind
from services.config import ApprovalConfig


def required(approval: ApprovalConfig, rows: int) -> int:
    """More than ``large_change_rows`` rows need ``large_change_approvals`` approvers."""
    return approval.large_change_approvals if rows > approval.large_change_rows else 1


def _approvals(n: int) -> str:
    return f"{n} approval{'' if n == 1 else 's'}"


def _what(kind: ChangeKind, rows: int) -> str:
    name = "staged redrive" if kind is ChangeKind.PLAN else kind.value
    if kind in (ChangeKind.RESUME, ChangeKind.RESOLVE):
        return name
    return f"{name} of {rows} row{'' if rows == 1 else 's'}"


def unreachable(
    *,
    kind: ChangeKind,
    rows: int,
    needed: int,
    approval: ApprovalConfig,
    requester: str,
    can: Sequence[str],
) -> str | None:
    """Why a request could never be approved by the people who may approve it (every
    approver but its requester), or None when it could."""
    if len(can) >= needed:
        return None
    why = (
        f" ([approval] large_change_approvals, for more than {approval.large_change_rows} rows)"
        if needed > 1
        else ""
    )
    have = (
        "nobody is configured"
        if not can
        else f"only {len(can)} {'is' if len(can) == 1 else 'are'} configured ({', '.join(can)})"
    )
    smaller = (
        f", or select at most {approval.large_change_rows} rows"
        if needed > 1 and rows > approval.large_change_rows
        else ""
    )
    return (
        f"{_what(kind, rows)} needs {_approvals(needed)}{why}, from people other than "
        f"{requester} with the approver role: {have}, so it could never be approved. "
        f'Nothing was requested: add approvers under [people] (roles = ["approver"])'
        f"{smaller}."
    )


def who_can(needed: int, given: int, can: Sequence[str]) -> str | None:
    """The line a pending request shows: how many approvals it still needs, from whom."""
    missing = needed - given
    if missing <= 0 or not can:
        return None
    return f"Needs {_approvals(missing)}, from any of: {', '.join(can)}"


def config_warning(approval: ApprovalConfig, approvers: Sequence[str]) -> str | None:
    """What ``config check`` warns of: changes the approvers configured could not approve
    (the requester never counts). None when every change could be approved."""
    n, names = len(approvers), ", ".join(approvers)
    large = approval.large_change_approvals
    if n == 0:
        return None  # "nobody has the approver role" is a problem of its own
    if n == 1:
        return (
            f"only one person is an approver ({names}): a change {names} requests could "
            "never be approved (the requester never counts); add approvers under [people]"
        )
    if large > n - 1:
        when = "" if large > n else " when one of them requests it"
        people = f"only {n} people are approvers"  # n > 1: one approver returned above
        return (
            f"a change of more than {approval.large_change_rows} rows needs "
            f"{_approvals(large)} besides its requester, and {people} ({names}): such a "
            f"change could never be approved{when}; add approvers under [people] or lower "
            "[approval] large_change_approvals"
        )
    return None
