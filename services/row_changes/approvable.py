"""A requeue, a cancel and a redrive at once: each freezes the rows named (a redrive
checks them with the redrives' checks first) and, once approved, changes those still in
their frozen state through the queue profile's guarded UPDATE, keeping each changed row's
image from just before the change in its item. Each step runs in the change request's
transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.changes import store
from services.changes.kinds import Ask, Done, Found, Keep, Kind, Scope
from services.changes.model import Executed, RequestRow
from services.config import RedriveConfig
from services.estate import items
from services.estate.estate import Estate
from services.estate.ops import Action, Ineligible, Selector, in_database
from services.plans.approvable import plan_scope
from services.plans.candidates import candidates, refused_or_shown
from services.row_changes.messages import RedriveWords, RowWords

REQUEUE = Action.REQUEUE.value
CANCEL = Action.CANCEL.value
REDRIVE = Action.REDRIVE.value  # named jobs, all at once


class RowChange(Kind):
    """The rows named, changed by the estate's ``action`` once approved."""

    words = RowWords()

    def __init__(self, action: Action, *, estate: Estate) -> None:
        self.name = action.value
        self.action = action
        self.estate = estate

    async def scope(
        self, conn: AsyncConnection, selector: Selector, *, queue: str | None, incident: str | None
    ) -> Scope:
        """A redrive of what a plan left dead again (``--from-plan``) is made in the plan's
        queue and belongs to its incident."""
        return await plan_scope(conn, selector, queue=queue, incident=incident)

    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        found = await ask.profile.changes.freeze(conn, action=self.action, selector=ask.selector)
        return Found(found.targets, found.ineligible)

    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> Done:
        """The request's items still in their frozen state, changed; each changed row's
        image from just before the change kept in its item."""
        profile = self.estate.profile(request.queue)
        note = (
            f"queuebot {request.ref}: {request.reason} (requested by "
            f"{request.requester_person}, approved by {', '.join(approvers)})"
        )[:1000]
        changes = profile.changes
        in_db = in_database(changes, conn.dialect.name)
        if in_db is not None:
            kept = await in_db.apply_kept(
                conn, request=request.id, action=self.action, now=now, note=note
            )
            changed, events, before = kept.changed, kept.job_events, kept.before
            left = await items.skipped(conn, request.id) if before.rows < kept.items else []
            skipped = [
                Ineligible(job, f"moved on since the request (no longer {state})")
                for job, state in left
            ]
        else:
            targets = await store.targets(conn, request.id)
            applied = await changes.apply(
                conn,
                action=self.action,
                targets=targets,
                now=now,
                note=note,
                duplicates=request.selector.duplicates,
            )
            before = await items.save_before(
                conn, request=request.id, targets=targets, before=applied.before
            )
            changed, events, skipped = applied.changed, applied.job_events, applied.skipped
        if self.action is Action.REDRIVE:
            await profile.plan_ops.log_redrives(conn, job_ids=changed, now=now)
        outcome = Executed(approvers=approvers, changed=changed, skipped=skipped, job_events=events)
        return Done(outcome, before)


class Redrive(RowChange):
    """The jobs named (or selected, every one in hand, or left dead again by a plan),
    redriven at once once their checks pass."""

    words = RedriveWords()

    def __init__(self, *, estate: Estate, redrive: RedriveConfig) -> None:
        super().__init__(Action.REDRIVE, estate=estate)
        self.redrive = redrive

    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        targets, excluded, evaluation = await candidates(
            conn,
            profile=ask.profile,
            selector=ask.selector,
            reason=ask.reason,
            config=self.redrive,
            now=ask.now,
            requester=ask.requester,
        )
        checks = refused_or_shown(REDRIVE, evaluation.refusal, evaluation.checks)
        return Found(targets, excluded, checks=checks)
