"""Handlers of the mutating commands: each creates, approves or rejects a change request."""

from __future__ import annotations

from commands.context import Invocation
from commands.deps import Deps
from commands.messages import checks_table, with_post_failures
from commands.model import (
    Approve,
    Cancel,
    Halt,
    Pending,
    Redrive,
    Reject,
    Requeue,
    Resume,
    Rollback,
    ShowPlan,
)
from commands.reply import Reply
from services import button_ids
from services import format as fmt
from services.audit import Actor
from services.changes import quorum
from services.changes.model import OVERRIDDEN, ChangeView, RequestState
from services.changes.words import said
from services.errors import PermissionDenied
from services.estate.ops import Selector
from services.message import Actions, Block, Button, Fields, Heading, Message, Table, Text
from services.outbox import destination
from services.plans.approvable import PLAN, RESUME, ROLLBACK
from services.plans.messages import plan_message, where_now
from services.plans.model import PlanView
from services.plans.publish import unshown_words
from services.row_changes.approvable import CANCEL, REDRIVE, REQUEUE

MAX_LISTED = 20


def actor_of(inv: Invocation) -> Actor:
    return Actor(
        person=inv.person.name if inv.person else None, platform=inv.platform, account=inv.account
    )


def origin_of(inv: Invocation) -> dict[str, str | None]:
    return {
        "platform": inv.platform,
        "channel": inv.channel,
        "thread": inv.thread,
        "correlation_id": inv.correlation_id,
    }


async def handle_requeue(cmd: Requeue, inv: Invocation, deps: Deps) -> Reply:
    view = await deps.changes.request(
        kind=REQUEUE,
        queue=cmd.queue,
        selector=Selector(ids=tuple(cmd.ids)),
        reason=cmd.reason,
        actor=actor_of(inv),
        origin=origin_of(inv),
        delivery=inv.delivery,
    )
    return Reply(change_message(view), ephemeral=False)


async def handle_cancel(cmd: Cancel, inv: Invocation, deps: Deps) -> Reply:
    selector = Selector(
        ids=tuple(cmd.ids), duplicates=cmd.duplicates, failure_reason=cmd.failure_reason
    )
    view = await deps.changes.request(
        kind=CANCEL,
        queue=cmd.queue,
        selector=selector,
        reason=cmd.reason,
        actor=actor_of(inv),
        origin=origin_of(inv),
        delivery=inv.delivery,
    )
    return Reply(change_message(view), ephemeral=False)


async def handle_redrive(cmd: Redrive, inv: Invocation, deps: Deps) -> Reply:
    selector = Selector(
        ids=tuple(cmd.ids),
        error_like=cmd.error_like,
        tenant=cmd.tenant,
        failure_reason=cmd.failure_reason,
        job_type=cmd.job_type,
        args_like=cmd.args_like,
        all_dead=cmd.all,
        sample=cmd.sample,
        max_rows=cmd.max,
        from_plan=cmd.from_plan,
        override_growth=cmd.override_growth,
    )
    view = await deps.changes.request(
        kind=PLAN if cmd.staged else REDRIVE,
        queue=cmd.queue,
        selector=selector,
        reason=cmd.reason,
        actor=actor_of(inv),
        incident=cmd.incident,
        evidence=cmd.evidence,
        origin=origin_of(inv),
        delivery=inv.delivery,
    )
    return Reply(change_message(view), ephemeral=False)


async def handle_pending(cmd: Pending, inv: Invocation, deps: Deps) -> Reply:
    views = await deps.changes.pending(queue=cmd.queue)
    if not views:
        return Reply(
            Message(
                "No change requests are waiting for approval.",
                (Text("No change requests are waiting for approval."),),
            )
        )
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
    return Reply(
        Message(
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
    )


async def handle_approve(cmd: Approve, inv: Invocation, deps: Deps) -> Reply:
    decision = await deps.changes.approve(
        number=cmd.request, actor=actor_of(inv), delivery=inv.delivery
    )
    message = with_post_failures(
        change_message(decision.view), decision.post_failures, pending=decision.posts_pending
    )
    return Reply(message, ephemeral=False)


async def handle_reject(cmd: Reject, inv: Invocation, deps: Deps) -> Reply:
    if inv.person is None:
        raise PermissionDenied("only people listed under [people] may reject requests")
    view = await deps.changes.reject(
        number=cmd.request,
        actor=actor_of(inv),
        reason=cmd.reason,
        may_reject_others=inv.person.has("approver"),
        delivery=inv.delivery,
    )
    return Reply(change_message(view), ephemeral=False)


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


async def handle_plan(cmd: ShowPlan, inv: Invocation, deps: Deps) -> Reply:
    """The plan as it stands, and which of its posts nobody was shown (never "told")."""
    view = await deps.plans.view(number=cmd.plan)
    message = plan_message(view)
    here = destination(inv.platform, inv.channel) if inv.channel else None
    said = unshown_words(view.ref, await deps.plans.unshown_news(number=cmd.plan), here=here)
    if said is None:
        return Reply(message)
    return Reply(Message(f"{message.summary} ({said})", (*message.blocks, Text(said))))


async def handle_halt(cmd: Halt, inv: Invocation, deps: Deps) -> Reply:
    done = await deps.plans.halt(
        number=cmd.plan, actor=actor_of(inv), reason=cmd.reason, delivery=inv.delivery
    )
    message = with_post_failures(
        halted_message(done.view), done.post_failures, pending=done.posts_pending
    )
    return Reply(message, ephemeral=False)


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


async def handle_resume(cmd: Resume, inv: Invocation, deps: Deps) -> Reply:
    return await _plan_change(RESUME, cmd.plan, cmd.reason, inv, deps)


async def handle_rollback(cmd: Rollback, inv: Invocation, deps: Deps) -> Reply:
    """A rollback request, with its own approval; or, when no row of the plan is still
    unclaimed (there is nothing to return), the plan closed at once."""
    closed = await deps.plans.close_if_nothing_unclaimed(
        number=cmd.plan, actor=actor_of(inv), reason=cmd.reason, delivery=inv.delivery
    )
    if closed is not None:
        return Reply(
            with_post_failures(
                closed_message(closed.view), closed.post_failures, pending=closed.posts_pending
            ),
            ephemeral=False,
        )
    return await _plan_change(ROLLBACK, cmd.plan, cmd.reason, inv, deps)


def closed_message(view: PlanView) -> Message:
    head = f"{view.ref} closed"
    text = (
        f"{view.ref} {view.note}; no approval is needed for a rollback that returns "
        f"nothing. No further wave starts. Now: {view.succeeded:,}/{view.total:,} "
        f"succeeded, {view.redead:,} dead again; {where_now(view)}. /queue plan {view.ref} "
        "shows it."
    )
    return Message(f"{head}. {text}", (Heading(head), Text(text)))


async def _plan_change(kind: str, plan: int, reason: str, inv: Invocation, deps: Deps) -> Reply:
    """A change request on a plan (resume, rollback): it needs its own approval."""
    view = await deps.changes.request(
        kind=kind,
        queue=None,
        selector=Selector(plan=plan),
        reason=reason,
        actor=actor_of(inv),
        origin=origin_of(inv),
        delivery=inv.delivery,
    )
    return Reply(change_message(view), ephemeral=False)
