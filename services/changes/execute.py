"""Executing an approved change request, inside the approval's transaction: what its kind
changes (services/changes/kinds.py), the request's result and its audit event commit
together, or not at all."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.audit.anchors import Anchors
from services.changes import store
from services.changes.kinds import Kinds
from services.changes.model import RequestRow, RequestState
from services.errors import ConcurrentChange


class Executor:
    def __init__(self, *, kinds: Kinds, audit: AuditTrail, anchors: Anchors | None) -> None:
        self.kinds = kinds
        self.audit = audit
        self.anchors = anchors  # None: no audit channel to post the trail's head to

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
        kind = self.kinds.find(request.kind)
        if kind is None:
            raise ValueError(f"{request.ref}: no {request.kind} requests are executed here")
        done = await kind.execute(conn, request, actor=actor, approvers=approvers, now=now)
        outcome = done.outcome
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
                "kind": request.kind,
                "requester": request.requester_person,
                "approvers": approvers,
                "plan": outcome.plan,
                # the jobs changed are in the request's result and its items; each row's
                # image from just before the change is in its item, digested here
                "changed": len(outcome.changed),
                "skipped": [[s.id, s.why] for s in outcome.skipped],
                "job_events": outcome.job_events,
                "before": done.before.as_json(),
            },
        )
        if self.anchors is not None:  # the head after this change, kept outside the database
            await self.anchors.record(conn, now=now)
