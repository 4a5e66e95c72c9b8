"""Executing an approved change request, inside the approval's transaction: the guarded
row change (or the plan step it starts), the request's result and its audit event commit
together, or not at all."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.audit.anchors import Anchors
from services.audit.row_digest import EMPTY, Digest
from services.changes import store
from services.changes.model import (
    ChangeKind,
    Executed,
    IncidentOverrides,
    RequestRow,
    RequestState,
    incident_number,
)
from services.errors import ConcurrentChange
from services.estate import items
from services.estate.estate import Estate
from services.estate.ops import Action, Ineligible, in_database
from services.plans.control import PlanControl
from services.plans.engine import PlanEngine
from services.plans.model import OVERRIDDEN


class Executor:
    def __init__(
        self,
        *,
        estate: Estate,
        plans: PlanEngine,
        control: PlanControl,
        audit: AuditTrail,
        anchors: Anchors | None,
        incidents: IncidentOverrides | None = None,
    ) -> None:
        self.incidents = incidents
        self.audit = audit
        self.anchors = anchors  # None: no audit channel to post the trail's head to
        self.estate = estate
        self.plans = plans
        self.control = control

    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> None:
        number = request.id
        if not await store.move(conn, number, to=RequestState.EXECUTED, now=now):
            # cannot happen while we hold the row lock; refuse loudly rather than guess
            raise ConcurrentChange(subject=request.ref)
        await store.adopt_legacy(conn, number)
        plan = request.selector.plan
        before = Digest(0, EMPTY)
        outcome = Executed(approvers=approvers)
        if request.kind is ChangeKind.PLAN:
            plan = await self.plans.start(
                conn,
                request=number,
                queue=request.queue,
                reason=request.reason,
                incident=request.incident,
                requester=request.requester_person,
                approvers=approvers,
                origin=request.origin,
                sample=request.selector.sample,
                actor=actor,
                now=now,
                overridden=[
                    [name, detail]
                    for name, verdict, detail in request.preview.checks
                    if verdict == OVERRIDDEN
                ],
            )
            outcome = Executed(approvers=approvers, plan=plan)
        elif request.kind is ChangeKind.RESUME and plan is not None:
            await self.control.resume(conn, number=plan, actor=actor, request=number, now=now)
            outcome = Executed(approvers=approvers, plan=plan)
        elif request.kind is ChangeKind.ROLLBACK and plan is not None:
            back = await self.control.rollback(
                conn, number=plan, actor=actor, request=number, now=now
            )
            outcome = Executed(approvers=approvers, plan=plan, changed=back)
        elif request.kind is ChangeKind.RESOLVE and self.incidents is not None:
            await self.incidents.resolve_overridden(
                conn,
                number=incident_number(request.incident),
                request=request.ref,
                requester=request.requester_person,
                approvers=approvers,
                reason=request.reason,
                actor=actor,
                now=now,
            )
        elif request.kind.action is not None:
            outcome, before = await self._apply(
                conn, request, request.kind.action, approvers=approvers, now=now
            )
        else:
            raise ValueError(
                f"{request.ref}: a {request.kind.value} request names no plan or incident here"
            )
        await store.save_result(conn, number, outcome.as_json())
        await self.audit.append(
            conn,
            action="change.executed",
            actor=actor,
            at=now,
            subject=request.ref,
            queue=request.queue,
            incident=request.incident,
            reason=request.reason,
            evidence=request.evidence,
            details={
                "kind": request.kind.value,
                "requester": request.requester_person,
                "approvers": approvers,
                "plan": outcome.plan,
                # the jobs changed are in the request's result and its items; each row's
                # image from just before the change is in its item, digested here
                "changed": len(outcome.changed),
                "skipped": [[s.id, s.why] for s in outcome.skipped],
                "job_events": outcome.job_events,
                "before": before.as_json(),
            },
        )
        if self.anchors is not None:  # the head after this change, kept outside the database
            await self.anchors.record(conn, now=now)

    async def _apply(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        action: Action,
        *,
        approvers: list[str],
        now: datetime,
    ) -> tuple[Executed, Digest]:
        """Requeue, cancel or redrive the request's items still in their frozen state,
        keeping each changed row's image from just before the change in its item."""
        profile = self.estate.profile(request.queue)
        note = (
            f"queuebot {request.ref}: {request.reason} (requested by "
            f"{request.requester_person}, approved by {', '.join(approvers)})"
        )[:1000]
        changes = profile.changes
        in_db = in_database(changes, conn.dialect.name)
        if in_db is not None:
            kept = await in_db.apply_kept(
                conn, request=request.id, action=action, now=now, note=note
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
                action=action,
                targets=targets,
                now=now,
                note=note,
                duplicates=request.selector.duplicates,
            )
            before = await items.save_before(
                conn, request=request.id, targets=targets, before=applied.before
            )
            changed, events, skipped = applied.changed, applied.job_events, applied.skipped
        if action is Action.REDRIVE:
            await profile.plan_ops.log_redrives(conn, job_ids=changed, now=now)
        outcome = Executed(approvers=approvers, changed=changed, skipped=skipped, job_events=events)
        return outcome, before
