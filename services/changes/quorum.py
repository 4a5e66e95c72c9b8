"""How many approvals a change request needs, and whether the people configured could
ever give them: a request nobody could approve is refused when it is asked for, not
left to expire (docs/decisions.md, "Quorum").

A change is judged by the rows it changes before a person can stop it: by default every
row, at once; a kind that changes its rows in stages says which it changes first
(``Kind.judged_rows``: a staged redrive its sample, a resume its next wave). What a kind
is called here and its ways to need fewer approvals are its own words (``KindWords``)."""

from __future__ import annotations

from collections.abc import Sequence

from services.audit import Actor
from services.changes.kinds import Kind
from services.config import ApprovalConfig
from services.errors import PreconditionFailed

SETTING = "[approval] large_change_approvals"


def required(approval: ApprovalConfig, rows: int) -> int:
    """More than ``large_change_rows`` rows (as ``Kind.judged_rows`` counts them) need
    ``large_change_approvals`` approvers."""
    return approval.large_change_approvals if rows > approval.large_change_rows else 1


def approvals_words(n: int) -> str:
    return f"{n} approval{'' if n == 1 else 's'}"


def unreachable(
    *,
    kind: Kind,
    rows: int,
    needed: int,
    approval: ApprovalConfig,
    requester: str,
    can: Sequence[str],
    judged: int | None = None,
) -> str | None:
    """Why a request could never be approved by the people who may approve it (every
    approver but its requester), or None when it could. ``judged``: the rows it is judged
    by (``Kind.judged_rows``), when not all of ``rows``."""
    if len(can) >= needed:
        return None
    why = f" ({SETTING}, for more than {approval.large_change_rows} rows)" if needed > 1 else ""
    have = (
        "nobody is configured"
        if not can
        else f"only {len(can)} {'is' if len(can) == 1 else 'are'} configured ({', '.join(can)})"
    )
    ways = ['add approvers under [people] (roles = ["approver"])']
    if needed > 1:
        if can:
            ways.append(f"lower {SETTING} to {len(can)}")
        ways += kind.words.ways_out(approval)
    what = kind.words.quorum_what(kind.name, rows, rows if judged is None else judged, approval)
    return (
        f"{what} needs {approvals_words(needed)}{why}, from people other than "
        f"{requester} with the approver role: {have}, so it could never be approved. "
        f"Nothing was requested: {_either(ways)}."
    )


def _either(ways: Sequence[str]) -> str:
    return ways[0] if len(ways) == 1 else f"{', '.join(ways[:-1])}, or {ways[-1]}"


def who_can(needed: int, given: int, can: Sequence[str]) -> str | None:
    """The line a pending request shows: how many approvals it still needs, from whom."""
    missing = needed - given
    if missing <= 0 or not can:
        return None
    return f"Needs {approvals_words(missing)}, from any of: {', '.join(can)}"


def note(
    approval: ApprovalConfig, *, kind: Kind, needed: int, rows: int, schedule: Sequence[int]
) -> str | None:
    """What a pending request says of its quorum: why it needs more than one approval and
    the other way out, or why a request of many rows needs one (its kind says); None
    otherwise."""
    judged = kind.judged_rows(rows, schedule)
    if needed <= 1:
        if rows > approval.large_change_rows:
            return kind.words.one_approval(approval, rows, judged)
        return None
    return (
        f"It needs {approvals_words(needed)}: {kind.words.changes} more than "
        f"{approval.large_change_rows} rows ([approval] large_change_rows), and {SETTING} is "
        f"{needed}; at 1, one approver decides such a change.{kind.words.fewer(approval)}"
    )


def approvals(
    approval: ApprovalConfig,
    *,
    kind: Kind,
    count: int,
    schedule: list[int],
    actor: Actor,
    can: Sequence[str] | None,
) -> int:
    """The approvals a request of ``count`` rows needs; refused (``PreconditionFailed``)
    when the people who could give them are too few (``can``: those who could approve,
    None where the people are not known here)."""
    judged = kind.judged_rows(count, schedule)
    needed = required(approval, judged)
    never = (
        None
        if can is None
        else unreachable(
            kind=kind,
            rows=count,
            judged=judged,
            needed=needed,
            approval=approval,
            requester=str(actor.person),
            can=can,
        )
    )
    if never is not None:
        raise PreconditionFailed(never)
    return needed
