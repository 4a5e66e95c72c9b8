"""How many approvals a change request needs, and whether the people configured could
ever give them: a request nobody could approve is refused when it is asked for, not
left to expire (docs/decisions.md, "Quorum").

A change is judged by the rows it changes before a person can stop it. For a requeue, a
cancel, a redrive by ids or a rollback that is every row, at once. A staged redrive
changes its sample first, and each later wave starts only once the one before it
succeeded, while anyone may halt it without an approval: it is judged by its sample. A
resume of a halted plan starts the plan's next wave, and the waves after it again grow
only while they succeed: it is judged by that wave."""

from __future__ import annotations

from collections.abc import Sequence

from services.audit import Actor
from services.changes.model import ChangeKind
from services.config import ApprovalConfig
from services.errors import PreconditionFailed

MAX_SAMPLE = 5  # a staged redrive's sample is 1 to 5 rows (--sample, [redrive] sample)
SETTING = "[approval] large_change_approvals"


def judged_rows(kind: ChangeKind, rows: int, schedule: Sequence[int]) -> int:
    """The rows a change is judged by: a staged redrive's sample (the first size of its
    schedule), a resume's next wave (its frozen schedule's one size), every other
    change's rows."""
    if kind in (ChangeKind.PLAN, ChangeKind.RESUME) and schedule:
        return schedule[0]
    return rows


def required(approval: ApprovalConfig, rows: int) -> int:
    """More than ``large_change_rows`` rows (as ``judged_rows`` counts them) need
    ``large_change_approvals`` approvers."""
    return approval.large_change_approvals if rows > approval.large_change_rows else 1


def _approvals(n: int) -> str:
    return f"{n} approval{'' if n == 1 else 's'}"


def _what(kind: ChangeKind, rows: int, judged: int, approval: ApprovalConfig) -> str:
    name = "staged redrive" if kind is ChangeKind.PLAN else kind.value
    if kind is ChangeKind.RESUME and judged > approval.large_change_rows:
        return (
            f"resume, whose next wave of {judged} rows is more than {approval.large_change_rows},"
        )
    if kind in (ChangeKind.RESUME, ChangeKind.RESOLVE):
        return name
    what = f"{name} of {rows} row{'' if rows == 1 else 's'}"
    if kind is ChangeKind.PLAN and judged > approval.large_change_rows:
        what += f", whose sample of {judged} rows is more than {approval.large_change_rows},"
    return what


def _one_approval(approval: ApprovalConfig) -> str:
    """What a staged redrive, judged by its sample, needs: true for every threshold."""
    if approval.large_change_rows >= MAX_SAMPLE:
        return "needs one approval"
    return f"needs one approval with --sample {approval.large_change_rows} or less"


def _staged(approval: ApprovalConfig) -> str:
    return f"a staged redrive is judged by its sample, and {_one_approval(approval)}"


def _ways_out(kind: ChangeKind, approval: ApprovalConfig, others: int) -> list[str]:
    """The other ways to have a large change approved than more approvers: fewer needed
    (when the ``others`` who could approve are any), fewer rows, or a staged plan."""
    ways = []
    if others > 0:
        ways.append(f"lower {SETTING} to {others}")
    if kind is ChangeKind.PLAN:
        ways.append(
            f"give --sample {approval.large_change_rows} or less (a staged redrive is "
            "judged by its sample)"
        )
    elif kind not in (ChangeKind.RESUME, ChangeKind.ROLLBACK, ChangeKind.RESOLVE):
        ways.append(f"select at most {approval.large_change_rows} rows")
    if kind is ChangeKind.REDRIVE:
        ways.append(
            "redrive them as a staged plan (select them with a filter or --all instead of "
            f"naming ids): {_staged(approval)}"
        )
    return ways


def unreachable(
    *,
    kind: ChangeKind,
    rows: int,
    needed: int,
    approval: ApprovalConfig,
    requester: str,
    can: Sequence[str],
    judged: int | None = None,
) -> str | None:
    """Why a request could never be approved by the people who may approve it (every
    approver but its requester), or None when it could. ``judged``: the rows it is judged
    by (``judged_rows``), when not all of ``rows``."""
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
        ways += _ways_out(kind, approval, len(can))
    what = _what(kind, rows, rows if judged is None else judged, approval)
    return (
        f"{what} needs {_approvals(needed)}{why}, from people other than "
        f"{requester} with the approver role: {have}, so it could never be approved. "
        f"Nothing was requested: {_either(ways)}."
    )


def _either(ways: list[str]) -> str:
    return ways[0] if len(ways) == 1 else f"{', '.join(ways[:-1])}, or {ways[-1]}"


def who_can(needed: int, given: int, can: Sequence[str]) -> str | None:
    """The line a pending request shows: how many approvals it still needs, from whom."""
    missing = needed - given
    if missing <= 0 or not can:
        return None
    return f"Needs {_approvals(missing)}, from any of: {', '.join(can)}"


def note(
    approval: ApprovalConfig, *, kind: ChangeKind, needed: int, rows: int, schedule: Sequence[int]
) -> str | None:
    """What a pending request says of its quorum: why it needs more than one approval and
    the other way out, or why a staged redrive of many rows needs one; None otherwise."""
    judged = judged_rows(kind, rows, schedule)
    if needed <= 1:
        if kind is ChangeKind.PLAN and rows > approval.large_change_rows:
            return (
                "One approval: a staged redrive is judged by the rows it changes before "
                f"anyone can halt it, its sample of {judged}; each later wave starts only "
                "once the one before it succeeded, and anyone may halt it (/queue halt, no "
                "approval needed)."
            )
        if kind is ChangeKind.RESUME and rows > approval.large_change_rows:
            return (
                "One approval: a resume is judged by the rows it changes before anyone can "
                f"halt the plan again, its next wave of {judged}; the waves after it start "
                "only once the one before succeeded, and anyone may halt it (/queue halt, "
                "no approval needed)."
            )
        return None
    changes = {
        ChangeKind.PLAN: "its sample changes",
        ChangeKind.RESUME: "its next wave changes",
    }.get(kind, "it changes")
    text = (
        f"It needs {_approvals(needed)}: {changes} more than {approval.large_change_rows} "
        f"rows ([approval] large_change_rows), and {SETTING} is {needed}; at 1, one "
        "approver decides such a change."
    )
    if kind is ChangeKind.REDRIVE:
        text += (
            " A staged redrive instead (a filter or --all rather than ids) is judged by its "
            f"sample, and {_one_approval(approval)}."
        )
    elif kind is ChangeKind.PLAN:
        text += (
            f" With --sample {approval.large_change_rows} or less it needs one (a staged "
            "redrive is judged by its sample)."
        )
    return text


def config_warning(
    approval: ApprovalConfig, approvers: Sequence[str], requesters: Sequence[str]
) -> str | None:
    """What ``config check`` warns of: changes the approvers configured could not approve
    for some of the people who may request them (the ``requesters``, with the operator
    role; a requester never counts for their own). None when every change could be
    approved whoever requests it."""
    n, names = len(approvers), ", ".join(approvers)
    if n == 0 or not requesters:
        return None  # "nobody has the approver role" is a problem of its own
    if n == 1 and approvers[0] in requesters:
        return (
            f"only one person is an approver ({names}): a change {names} requests could "
            "never be approved (the requester never counts); add approvers under [people]"
        )
    large = approval.large_change_approvals
    reach = {r: len([a for a in approvers if a != r]) for r in requesters}
    stuck = [r for r in requesters if reach[r] < large]
    if not stuck:
        return None
    most = min(reach.values())
    who = (
        "whoever requests it"
        if len(stuck) == len(requesters)
        else f"when {_either_names(stuck)} requests it"
    )
    lower = f"lower {SETTING} to {most}" if most > 0 else ""
    people = f"only {n} {'person is an approver' if n == 1 else 'people are approvers'}"
    return (
        f"a change of more than {approval.large_change_rows} rows (a requeue, cancel, "
        f"redrive by ids or rollback) needs {_approvals(large)} besides its requester "
        f"({SETTING}), and {people} ({names}): such a change could never be approved "
        f'{who}; add approvers under [people] (roles = ["approver"])'
        f"{f' or {lower}' if lower else ''}. A staged redrive, judged by its sample, "
        f"{_one_approval(approval)}."
    )


def _either_names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def approvals(
    approval: ApprovalConfig,
    *,
    kind: ChangeKind,
    count: int,
    schedule: list[int],
    actor: Actor,
    can: Sequence[str] | None,
) -> int:
    """The approvals a request of ``count`` rows needs; refused (``PreconditionFailed``)
    when the people who could give them are too few (``can``: those who could approve,
    None where the people are not known here)."""
    judged = judged_rows(kind, count, schedule)
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
