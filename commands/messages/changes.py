"""The words of the change commands' replies: a change request's message (its preview
while pending, its outcome once decided), the list of those waiting, and the replies to a
plan's halt and close. What a kind says of its own request (its headline, its outcome) is
its domain's (``services/*/messages.py``, reached through ``said``)."""

from __future__ import annotations

from collections.abc import Sequence

from commands.messages import checks_table
from services import button_ids
from services import format as fmt
from services.changes import quorum
from services.changes.model import OVERRIDDEN, ChangeView, RequestState
from services.changes.words import said
from services.message import Actions, Block, Button, Fields, Heading, Message, Table, Text
from services.plans.messages import where_now
from services.plans.model import PlanView

MAX_LISTED = 20  # ineligible rows and skipped rows named in a request's message, at most


def pending_message(views: Sequence[ChangeView]) -> Message:
    """The change requests waiting for approval, as a table (or a line saying none)."""
    if not views:
        none = "No change requests are waiting for approval."
        return Message(none, (Text(none),))
    rows = tuple(
        (
            v.ref,
            v.kind,
            v.queue,
            fmt.count(v.eligible),
            v.requester,
            f"{len(v.approvals)}/{v.approvals_required}",
            fmt.when(v.expires_at),
            fmt.clip(v.reason, 50),
        )
        for v in views
    )
    head = f"{len(views)} change request(s) waiting for approval"
    return Message(
        head,
        (
            Heading(head),
            Table(
                (
                    "request",
                    "kind",
                    "queue",
                    "rows",
                    "requested by",
                    "approvals",
                    "expires",
                    "reason",
                ),
                rows,
                numeric=(3,),
            ),
        ),
    )


def change_message(v: ChangeView) -> Message:
    """The request's message: a preview while pending, the outcome once decided. What
    its kind says of it (its headline, its outcome) is its domain's words (``said``)."""
    says = said(v)
    what = says.headline
    status = {
        RequestState.PENDING: f"waiting for approval ({len(v.approvals)} of "
        f"{v.approvals_required})",
        RequestState.EXECUTED: f"approved by {', '.join(v.approvals)} and executed",
        RequestState.REJECTED: f"{'withdrawn' if v.withdrawn else 'rejected'} by "
        f"{v.rejected_by}" + (f": {v.rejection_reason}" if v.rejection_reason else ""),
        RequestState.EXPIRED: "expired without approval",
    }[v.state]
    blocks: list[Block] = [
        Heading(f"{v.ref}: {what} - {status}"),
        Fields(
            tuple(
                item
                for item in (
                    ("requested by", v.requester),
                    ("at", fmt.when(v.requested_at)),
                    ("expires", fmt.when(v.expires_at)),
                    ("selection", fmt.clip(v.selector, 80)) if says.selection else None,
                    ("incident", _incident(v)) if v.incident else None,
                    ("evidence", v.evidence) if v.evidence else None,
                )
                if item is not None
            )
        ),
        Text(f"Reason: {v.reason}"),
    ]
    if v.by_signature:
        blocks.append(
            Table(
                ("rows", "failure signature"),
                tuple((fmt.count(n), sig) for sig, n in v.by_signature[:MAX_LISTED]),
                title="Frozen rows by failure signature",
                numeric=(0,),
            )
        )
        left_out = fmt.left_out(
            min(len(v.by_signature), MAX_LISTED),
            len(v.by_signature),
            "signatures",
            rest=sum(n for _, n in v.by_signature[MAX_LISTED:]),
            whole=sum(n for _, n in v.by_signature),
            unit="frozen rows",
        )
        if left_out:
            blocks.append(Text(left_out))
    if v.checks:
        overridden = [name for name, verdict, _ in v.checks if verdict == OVERRIDDEN]
        if overridden and says.overrides:
            blocks.append(
                Text(
                    f"{v.requester} overrode a failed precondition ({', '.join(overridden)}); "
                    "an approval goes ahead despite it"
                )
            )
        blocks.append(checks_table(v.checks, says.checks_title))
    if v.schedule:
        waves = " + ".join(fmt.count(n) for n in v.schedule[:12])
        more = f" + ... ({len(v.schedule)} waves)" if len(v.schedule) > 12 else ""
        blocks.append(
            Text(
                f"Waves: sample {waves}{more}; each starts only when the one "
                "before is all done with nothing dead again"
            )
        )
    if v.ineligible:
        blocks.append(
            Table(
                ("id", "why not"),
                tuple((i.id, i.why) for i in v.ineligible[:MAX_LISTED]),
                title=f"Not eligible ({len(v.ineligible)}), left alone",
            )
        )
        unlisted = fmt.not_listed(MAX_LISTED, len(v.ineligible), "ineligible rows")
        if unlisted:
            blocks.append(Text(unlisted))
    if v.state is RequestState.EXECUTED and v.result is not None:
        blocks.append(_outcome(v, says.outcome))
    if v.state is RequestState.PENDING:
        who = quorum.who_can(v.approvals_required, len(v.approvals), v.can_approve)
        if who is not None:
            blocks.append(Text(who))
        if v.quorum_note is not None:
            blocks.append(Text(v.quorum_note))
        blocks.append(
            Actions(
                (
                    Button(
                        button_ids.approve(v.number),
                        "Approve",
                        "primary",
                        f"/queue approve {v.ref}",
                    ),
                    Button(
                        button_ids.reject(v.number), "Reject", "danger", f"/queue reject {v.ref}"
                    ),
                )
            )
        )
    summary = f"{v.ref}: {what} - {status}"
    if v.state is RequestState.EXECUTED and v.result is not None:
        summary += f": {says.outcome or 'not executed'}"
    return Message(summary, tuple(blocks))


def _incident(v: ChangeView) -> str:
    """The incident it is made under, and the plan it took it from where nobody named it."""
    lent = f" (from P-{v.incident_from})" if v.incident_from is not None else ""
    return f"{v.incident}{lent}"


def _outcome(v: ChangeView, line: str | None) -> Block:
    skipped = v.result.skipped if v.result else []
    text = "Result: " + (line or "not executed") + "."
    if skipped:
        shown = "; ".join(f"{i.id}: {i.why}" for i in skipped[:MAX_LISTED])
        text += f" Skipped, not forced: {shown}"
    return Text(text)


def halted_message(view: PlanView) -> Message:
    """The reply to a halt: what happened and what can follow. The plan's own message,
    updated in place where the plan was requested, carries the rest (in the console it is
    printed just above), so the reply does not repeat it."""
    head = f"{view.ref} {view.note}" if view.note else f"{view.ref} halted"
    text = (
        f"No further wave starts; jobs already redriven run to their end, and their "
        f"outcomes are still counted. Now: "
        f"{where_now(view)}. The plan's message is updated where it was requested; "
        f"/queue plan {view.ref} shows it."
    )
    nxt = (
        f'Resume (needs a new approval): /queue resume {view.ref} --reason "..."   '
        f'Roll back the unclaimed: /queue rollback {view.ref} --reason "..." (with none '
        "unclaimed, that closes the plan at once)"
    )
    return Message(f"{head}. {text}", (Heading(head), Text(text), Text(nxt)))


def closed_message(view: PlanView) -> Message:
    head = f"{view.ref} closed"
    text = (
        f"{view.ref} {view.note}; no approval is needed for a rollback that returns "
        f"nothing. No further wave starts. Now: {view.succeeded:,}/{view.total:,} "
        f"succeeded, {view.redead:,} dead again; {where_now(view)}. /queue plan {view.ref} "
        "shows it."
    )
    return Message(f"{head}. {text}", (Heading(head), Text(text)))
