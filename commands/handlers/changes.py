"""Handlers of the mutating commands: each creates, approves or rejects a change request."""

from __future__ import annotations

from commands.context import Invocation
from commands.deps import Deps
from commands.messages import with_post_failures
from commands.messages.changes import (
    change_message,
    closed_message,
    halted_message,
    pending_message,
)
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
from services.audit import Actor
from services.changes.eligible import ApproverStanding
from services.errors import PermissionDenied
from services.estate.ops import Selector
from services.message import Message, Text
from services.outbox import destination
from services.plans.approvable import PLAN, RESUME, ROLLBACK
from services.plans.messages import plan_message
from services.plans.publish import unshown_words
from services.row_changes.approvable import CANCEL, REDRIVE, REQUEUE


def actor_of(inv: Invocation) -> Actor:
    return Actor(
        person=inv.person.name if inv.person else None, platform=inv.platform, account=inv.account
    )


def standing_of(inv: Invocation) -> ApproverStanding:
    """What the approver's standing rests on now (their teams, and the grounds of their
    roles), for the owner rule and the approval's audit event."""
    if inv.person is None:
        return ApproverStanding()
    return ApproverStanding(teams=inv.person.teams, grounds=tuple(inv.person.basis()))


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
    return Reply(pending_message(await deps.changes.pending(queue=cmd.queue)))


async def handle_approve(cmd: Approve, inv: Invocation, deps: Deps) -> Reply:
    decision = await deps.changes.approve(
        number=cmd.request, actor=actor_of(inv), delivery=inv.delivery, standing=standing_of(inv)
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
