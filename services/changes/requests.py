"""Change requests (SPEC §6): frozen when requested, approved by another person, executed
exactly once in the same transaction as the approval, the queue update and the audit.

Every decision on a request starts by locking its row (``UPDATE ... SET state = state``),
which serialises approvers on PostgreSQL (a row lock) and on SQLite (the write lock), and
the pending -> executed transition is conditional on ``state = 'pending'``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services import audit
from services.audit import Actor
from services.changes.model import (
    ChangeKind,
    ChangeView,
    Ineligible,
    RequestState,
    Selector,
    Target,
)
from services.changes.ops import changes_for
from services.changes.store import (
    RequestStore,
    _ap,
    _aware,
    _cr,
    _hm,
    _nothing_to_do,
    _target_from,
    _target_json,
)
from services.errors import Conflict, NotFound, PermissionDenied, PreconditionFailed
from services.estate.profile import QueueProfile
from services.jsonable import digest, jsonable
from services.plans.engine import plan_ops_for
from services.plans.model import ACTIVE, Check
from services.scheduler import FollowUp

log = logging.getLogger("queuebot.changes")


@dataclass(frozen=True)
class Decision:
    view: ChangeView
    executed: bool
    approvals: int
    follow_ups: list[FollowUp] = field(default_factory=list)


@dataclass(frozen=True)
class _Frozen:
    targets: list[Target]
    ineligible: list[Ineligible]
    checks: list[Check] = field(default_factory=list)
    schedule: list[int] = field(default_factory=list)
    affected: int | None = None


class ChangeRequests(RequestStore):
    # -- request ---------------------------------------------------------------------

    async def request(
        self,
        *,
        kind: ChangeKind,
        queue: str | None,
        selector: Selector,
        reason: str,
        actor: Actor,
        incident: str | None = None,
        evidence: str | None = None,
        origin: dict[str, Any] | None = None,
    ) -> ChangeView:
        if actor.person is None:
            raise PermissionDenied("only people listed under [people] may request changes")
        if selector.plan is not None and queue is None:
            queue = await self.plans.queue_of(number=selector.plan)
        profile = self.estate.profile(queue)
        now = self.clock()
        async with self._engine().begin() as conn:
            frozen = await self._freeze(conn, kind, profile, selector, reason)
            if not frozen.targets and kind not in (ChangeKind.RESUME, ChangeKind.ROLLBACK):
                raise PreconditionFailed(_nothing_to_do(kind, selector, frozen.ineligible))
            # The full snapshot (every column of every row) is hashed and kept in the
            # hash-chained audit event; the request keeps what execution needs.
            snapshot = [_target_json(t) for t in frozen.targets]
            targets = [{k: v for k, v in t.items() if k != "row"} for t in snapshot]
            count = frozen.affected if frozen.affected is not None else len(targets)
            required = (
                self.approval.large_change_approvals
                if count > self.approval.large_change_rows
                else 1
            )
            values = {
                "kind": kind.value,
                "queue": profile.queue,
                "profile": profile.name,
                "state": RequestState.PENDING.value,
                "requested_at": now,
                "expires_at": now + timedelta(minutes=self.approval.expiry_minutes),
                "requester_person": actor.person,
                "requester_platform": actor.platform,
                "requester_account": actor.account,
                "reason": reason,
                "incident": incident,
                "evidence": evidence,
                "selector": jsonable(selector.as_json()),
                "targets": {"items": targets},
                "ineligible": {"items": [[i.id, i.why] for i in frozen.ineligible]},
                "snapshot_hash": digest(snapshot),
                "preview": {
                    "by_signature": Counter(t["signature"] for t in targets).most_common(),
                    "checks": [[c.name, c.verdict, c.detail] for c in frozen.checks],
                    "schedule": frozen.schedule,
                    "plan": selector.plan,
                },
                "eligible_count": count,
                "approvals_required": required,
                "origin": jsonable(origin or {}),
            }
            number = (
                await conn.execute(_cr.insert().values(**values).returning(_cr.c.id))
            ).scalar_one()
            await audit.append(
                conn,
                action="change.requested",
                actor=actor,
                at=now,
                subject=f"CR-{number}",
                queue=profile.queue,
                incident=incident,
                reason=reason,
                evidence=evidence,
                details={
                    "kind": kind.value,
                    "selector": values["selector"],
                    "job_ids": [t["id"] for t in targets],
                    "snapshot": snapshot,
                    "ineligible": values["ineligible"]["items"],
                    "snapshot_hash": values["snapshot_hash"],
                    "approvals_required": required,
                },
            )
            return await self._view(conn, int(number))

    async def _freeze(
        self,
        conn: AsyncConnection,
        kind: ChangeKind,
        profile: QueueProfile,
        selector: Selector,
        reason: str,
    ) -> _Frozen:
        """What the request will change, checked, before anyone approves it."""
        if kind in (ChangeKind.REQUEUE, ChangeKind.CANCEL):
            frozen = await changes_for(profile).freeze(conn, kind=kind, selector=selector)
            return _Frozen(frozen.targets, frozen.ineligible)
        if kind in (ChangeKind.RESUME, ChangeKind.ROLLBACK):
            assert selector.plan is not None
            states = ("halted",) if kind is ChangeKind.RESUME else ACTIVE
            plan = await self.plans.require(conn, number=selector.plan, states=states)
            if plan["queue"] != profile.queue:
                raise NotFound(
                    f"P-{selector.plan} belongs to queue {plan['queue']}; add "
                    f"--queue {plan['queue']}"
                )
            view = await self.plans.view_in(conn, number=selector.plan)
            affected = (
                view.total - view.redriven
                if kind is ChangeKind.RESUME
                else view.redriven - view.succeeded - view.redead - view.rolled_back
            )
            return _Frozen([], [], affected=affected)
        staged = kind is ChangeKind.PLAN
        if staged:
            active = await self.plans.active_plan(conn, profile.queue)
            if active is not None:
                raise Conflict(
                    f"queue {profile.queue} already has an active plan, "
                    f"P-{active}: one plan per queue. See /queue plan P-{active}."
                )
        targets, excluded, evaluation = await self.plans.candidates(
            conn,
            profile=profile,
            selector=selector,
            reason=reason,
            staged=staged,
            limit=selector.max_rows if staged else None,
        )
        if evaluation.refusal:
            listed = "; ".join(f"{c.name}: {c.verdict} ({c.detail})" for c in evaluation.checks)
            raise PreconditionFailed(f"{kind.value} {evaluation.refusal}. All checks: {listed}")
        schedule = self.plans.schedule_for(len(targets), selector.sample) if staged else []
        return _Frozen(targets, excluded, checks=evaluation.checks, schedule=schedule)

    # -- decisions -------------------------------------------------------------------

    async def approve(self, *, number: int, actor: Actor) -> Decision:
        now = self.clock()
        expired = False
        async with self._engine().begin() as conn:
            cr = await self._lock(conn, number)
            if cr["state"] != RequestState.PENDING.value:
                raise Conflict(await self._already(conn, cr))
            if now >= _aware(cr["expires_at"]):
                await self._expire(conn, cr, now)
                expired = True
            else:
                decision = await self._approve_locked(conn, cr, actor, now)
        if expired:
            raise Conflict(
                f"CR-{number} expired at {_hm(cr['expires_at'])} without approval; "
                "request it again if the change is still wanted"
            )
        for follow_up in decision.follow_ups:  # chat posts, after the commit
            try:
                await follow_up()
            except Exception:
                log.exception("a follow-up of CR-%s failed", number)
        return decision

    async def _approve_locked(
        self, conn: AsyncConnection, cr: dict[str, Any], actor: Actor, now: datetime
    ) -> Decision:
        number = cr["id"]
        if actor.person == cr["requester_person"]:
            raise PermissionDenied(
                f"you requested CR-{number}; another approver must approve it (the two-person "
                "rule holds across Slack, Discord and the console)"
            )
        approvers = await self._approvers(conn, number)
        if actor.person in approvers:
            missing = cr["approvals_required"] - len(approvers)
            raise Conflict(
                f"you already approved CR-{number}; it needs {missing} more "
                "approval(s) from someone else"
            )
        await _record_decision(conn, number, actor, "approve", now)
        approvers.append(str(actor.person))
        await audit.append(
            conn,
            action="change.approved",
            actor=actor,
            at=now,
            subject=f"CR-{number}",
            queue=cr["queue"],
            incident=cr["incident"],
            details={"approvals": approvers, "required": cr["approvals_required"]},
        )
        if len(approvers) < cr["approvals_required"]:
            return Decision(
                await self._view(conn, number), executed=False, approvals=len(approvers)
            )
        follow_ups = await self._execute(conn, cr, actor, approvers, now)
        return Decision(
            await self._view(conn, number),
            executed=True,
            approvals=len(approvers),
            follow_ups=follow_ups,
        )

    async def _execute(
        self,
        conn: AsyncConnection,
        cr: dict[str, Any],
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> list[FollowUp]:
        number = cr["id"]
        moved = await conn.execute(
            _cr.update()
            .where(_cr.c.id == number, _cr.c.state == RequestState.PENDING.value)
            .values(state=RequestState.EXECUTED.value, decided_at=now)
        )
        if moved.rowcount != 1:  # cannot happen while we hold the row lock; refuse loudly
            raise Conflict(f"CR-{number} changed state while being approved; nothing was done")
        kind = ChangeKind(cr["kind"])
        plan_no = cr["selector"].get("plan")
        follow_ups: list[FollowUp] = []
        before: list[Any] = []
        result: dict[str, Any] = {
            "approvers": approvers,
            "changed": [],
            "skipped": [],
            "job_events": 0,
        }
        if kind is ChangeKind.PLAN:
            plan_no, follow_ups = await self.plans.start(
                conn, cr=cr, approvers=approvers, actor=actor, now=now
            )
            result["plan"] = plan_no
        elif kind is ChangeKind.RESUME:
            follow_ups = await self.plans.resume(
                conn, number=int(plan_no), actor=actor, request=number, now=now
            )
            result["plan"] = plan_no
        elif kind is ChangeKind.ROLLBACK:
            back, follow_ups = await self.plans.rollback(
                conn, number=int(plan_no), actor=actor, request=number, now=now
            )
            result.update(plan=plan_no, changed=back)
        else:
            before = await self._apply(
                conn, cr, kind=kind, approvers=approvers, now=now, result=result
            )
        await conn.execute(_cr.update().where(_cr.c.id == number).values(result=result))
        changed = set(result["changed"])
        items = cr["targets"]["items"]
        await audit.append(
            conn,
            action="change.executed",
            actor=actor,
            at=now,
            subject=f"CR-{number}",
            queue=cr["queue"],
            incident=cr["incident"],
            reason=cr["reason"],
            evidence=cr["evidence"],
            details={
                "kind": cr["kind"],
                "requester": cr["requester_person"],
                "approvers": approvers,
                "plan": result.get("plan"),
                "changed": result["changed"],
                "message_ids": [
                    i["key"]["message_id"]
                    for i in items
                    if i["id"] in changed and "message_id" in i["key"]
                ],
                "skipped": result["skipped"],
                "job_events": result["job_events"],
                "before": before,
            },
        )
        return follow_ups

    async def _apply(
        self,
        conn: AsyncConnection,
        cr: dict[str, Any],
        *,
        kind: ChangeKind,
        approvers: list[str],
        now: datetime,
        result: dict[str, Any],
    ) -> list[Any]:
        """Requeue, cancel or redrive the frozen rows still in their snapshotted state."""
        profile = self.estate.profile(cr["queue"])
        note = (
            f"queuebot CR-{cr['id']}: {cr['reason']} (requested by {cr['requester_person']},"
            f" approved by {', '.join(approvers)})"
        )[:1000]
        applied = await changes_for(profile).apply(
            conn,
            kind=kind,
            targets=[_target_from(i) for i in cr["targets"]["items"]],
            now=now,
            note=note,
            duplicates=bool(cr["selector"].get("duplicates")),
        )
        if kind is ChangeKind.REDRIVE:
            await plan_ops_for(profile).log_redrives(conn, job_ids=applied.changed, now=now)
        result.update(
            changed=applied.changed,
            skipped=[[s.id, s.why] for s in applied.skipped],
            job_events=applied.job_events,
        )
        return applied.before

    async def reject(
        self, *, number: int, actor: Actor, reason: str | None, may_reject_others: bool
    ) -> ChangeView:
        now = self.clock()
        async with self._engine().begin() as conn:
            cr = await self._lock(conn, number)
            if cr["state"] != RequestState.PENDING.value:
                raise Conflict(await self._already(conn, cr))
            own = actor.person == cr["requester_person"]
            if not own and not may_reject_others:
                raise PermissionDenied(f"only an approver or the requester may reject CR-{number}")
            await conn.execute(
                _cr.update()
                .where(
                    _cr.c.id == number,
                    _cr.c.state == RequestState.PENDING.value,
                )
                .values(
                    state=RequestState.REJECTED.value,
                    decided_at=now,
                    result={"rejected_by": actor.person, "reason": reason, "withdrawn": own},
                )
            )
            await _record_decision(conn, number, actor, "reject", now)
            await audit.append(
                conn,
                action="change.rejected",
                actor=actor,
                at=now,
                subject=f"CR-{number}",
                queue=cr["queue"],
                incident=cr["incident"],
                reason=reason,
                details={"withdrawn": own},
            )
            return await self._view(conn, number)


async def _record_decision(
    conn: AsyncConnection, number: int, actor: Actor, decision: str, now: datetime
) -> None:
    """Who approved or rejected the request, from which platform account, when."""
    await conn.execute(
        _ap.insert().values(
            request_id=number,
            person=actor.person,
            platform=actor.platform,
            account=actor.account,
            decision=decision,
            at=now,
        )
    )
