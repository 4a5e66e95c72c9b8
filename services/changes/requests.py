"""Change requests (SPEC §6): frozen when requested, approved by another person, executed
exactly once in the same transaction as the approval, the queue update and the audit.

Every decision on a request starts by locking its row (``UPDATE ... SET state = state``),
which serialises approvers on PostgreSQL (a row lock) and on SQLite (the write lock), and
the pending -> executed transition is conditional on ``state = 'pending'``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import audit
from services.audit import Actor
from services.changes.message_job import MessageJobChanges
from services.changes.model import (
    ChangeKind,
    ChangeView,
    Ineligible,
    RequestState,
    Selector,
    Target,
)
from services.changes.ops import ChangeOps
from services.changes.worker_queue import WorkerQueueChanges
from services.config import ApprovalConfig, RedriveConfig
from services.errors import Conflict, NotFound, PermissionDenied, PreconditionFailed
from services.estate.estate import Estate
from services.estate.message_job import MessageJobProfile
from services.estate.profile import QueueProfile
from services.estate.worker_queue import WorkerQueueProfile
from services.jsonable import digest, jsonable
from services.models import Approval, ChangeRequest
from services.plans.engine import PlanEngine, plan_ops_for
from services.plans.model import ACTIVE, Check
from services.scheduler import FollowUp

log = logging.getLogger("queuebot.changes")
_cr = cast(sa.Table, ChangeRequest.__table__)
_ap = cast(sa.Table, Approval.__table__)


def changes_for(profile: QueueProfile) -> ChangeOps:
    if isinstance(profile, WorkerQueueProfile):
        return WorkerQueueChanges(profile)
    if isinstance(profile, MessageJobProfile):
        return MessageJobChanges(profile)
    raise TypeError(f"no change operations for profile {profile.name}")


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


class ChangeRequests:
    def __init__(
        self,
        *,
        estate: Estate,
        state_engine: AsyncEngine,
        approval: ApprovalConfig,
        clock: Callable[[], datetime],
        plans: PlanEngine | None = None,
    ) -> None:
        self.estate = estate
        self.state_engine = state_engine
        self.approval = approval
        self.clock = clock
        self.plans = plans or PlanEngine(
            estate=estate,
            engine=state_engine,
            config=RedriveConfig(),
            clock=clock,
            changes_for=changes_for,
        )

    def _engine(self) -> AsyncEngine:
        if self.estate.engine is not self.state_engine:
            raise PreconditionFailed(
                "queuebot changes queue rows only when its own tables live in the queue's "
                "database, so the change and its audit event commit together. Point "
                "QUEUEBOT_DATABASE_URL at the queue database (queuebot's tables are "
                "prefixed qb_)."
            )
        return self.state_engine

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
        await conn.execute(
            _ap.insert().values(
                request_id=number,
                person=actor.person,
                platform=actor.platform,
                account=actor.account,
                decision="approve",
                at=now,
            )
        )
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
            await conn.execute(
                _ap.insert().values(
                    request_id=number,
                    person=actor.person,
                    platform=actor.platform,
                    account=actor.account,
                    decision="reject",
                    at=now,
                )
            )
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

    async def expire_due(self) -> list[int]:
        """Mark every pending request past its expiry as expired (with an audit event)."""
        async with self._engine().begin() as conn:
            return await self.expire_due_in(conn, self.clock())

    async def expire_due_in(self, conn: AsyncConnection, now: datetime) -> list[int]:
        due = (
            (
                await conn.execute(
                    sa.select(_cr.c.id).where(
                        _cr.c.state == RequestState.PENDING.value,
                        _cr.c.expires_at <= now,
                    )
                )
            )
            .scalars()
            .all()
        )
        expired = []
        for number in due:
            cr = await self._lock(conn, int(number))
            if cr["state"] == RequestState.PENDING.value:
                await self._expire(conn, cr, now)
                expired.append(int(number))
        return expired

    async def pending(self, *, queue: str | None = None) -> list[ChangeView]:
        await self.expire_due()
        async with self.state_engine.connect() as conn:
            query = sa.select(_cr.c.id).where(_cr.c.state == RequestState.PENDING.value)
            if queue is not None:
                query = query.where(_cr.c.queue == self.estate.profile(queue).queue)
            numbers = (await conn.execute(query.order_by(_cr.c.id))).scalars().all()
            return [await self._view(conn, int(n)) for n in numbers]

    async def get(self, *, number: int) -> ChangeView:
        async with self.state_engine.connect() as conn:
            return await self._view(conn, number)

    # -- helpers ---------------------------------------------------------------------

    async def _lock(self, conn: AsyncConnection, number: int) -> dict[str, Any]:
        locked = await conn.execute(
            _cr.update().where(_cr.c.id == number).values(state=_cr.c.state).returning(*_cr.c)
        )
        row = locked.mappings().first()
        if row is None:
            raise NotFound(f"no change request CR-{number}; see /queue pending")
        return dict(row)

    async def _expire(self, conn: AsyncConnection, cr: dict[str, Any], now: datetime) -> None:
        await conn.execute(
            _cr.update()
            .where(
                _cr.c.id == cr["id"],
                _cr.c.state == RequestState.PENDING.value,
            )
            .values(state=RequestState.EXPIRED.value, decided_at=now)
        )
        await audit.append(
            conn,
            action="change.expired",
            actor=Actor.system("expiry"),
            at=now,
            subject=f"CR-{cr['id']}",
            queue=cr["queue"],
            incident=cr["incident"],
            details={"expires_at": cr["expires_at"]},
        )

    async def _approvers(self, conn: AsyncConnection, number: int) -> list[str]:
        return [
            str(p)
            for p in (
                await conn.execute(
                    sa.select(_ap.c.person)
                    .where(_ap.c.request_id == number, _ap.c.decision == "approve")
                    .order_by(_ap.c.id)
                )
            )
            .scalars()
            .all()
        ]

    async def _already(self, conn: AsyncConnection, cr: dict[str, Any]) -> str:
        number, state = cr["id"], cr["state"]
        when = _hm(cr["decided_at"])
        if state == RequestState.EXECUTED.value:
            who = ", ".join(await self._approvers(conn, number))
            res = cr["result"] or {}
            return (
                f"CR-{number} was already approved by {who} at {when} and executed: "
                f"{len(res.get('changed', []))} row(s) changed, "
                f"{len(res.get('skipped', []))} skipped. Nothing more was done."
            )
        if state == RequestState.REJECTED.value:
            rejecter = (cr["result"] or {}).get("rejected_by")
            return f"CR-{number} was rejected by {rejecter} at {when}; nothing was changed."
        return f"CR-{number} expired at {_hm(cr['expires_at'])}; request it again if needed."

    async def _view(self, conn: AsyncConnection, number: int) -> ChangeView:
        columns = [c for c in _cr.c if c.name != "targets"]  # ten thousand keys, not needed
        cr = (await conn.execute(sa.select(*columns).where(_cr.c.id == number))).mappings().first()
        if cr is None:
            raise NotFound(f"no change request CR-{number}; see /queue pending")
        approvals = await self._approvers(conn, number)
        signatures = [(str(sig), int(n)) for sig, n in cr["preview"]["by_signature"]]
        result = cr["result"]
        return ChangeView(
            number=int(cr["id"]),
            kind=ChangeKind(cr["kind"]),
            queue=cr["queue"],
            state=RequestState(cr["state"]),
            requester=cr["requester_person"],
            requested_at=_aware(cr["requested_at"]),
            expires_at=_aware(cr["expires_at"]),
            reason=cr["reason"],
            incident=cr["incident"],
            evidence=cr["evidence"],
            selector=Selector.from_json(cr["selector"]).describe(),
            eligible=int(cr["eligible_count"]),
            by_signature=signatures,
            ineligible=[Ineligible(i, w) for i, w in cr["ineligible"]["items"]],
            approvals_required=int(cr["approvals_required"]),
            approvals=approvals,
            rejected_by=(result or {}).get("rejected_by") if cr["state"] == "rejected" else None,
            checks=[(str(n), str(v), str(d)) for n, v, d in cr["preview"].get("checks", [])],
            schedule=list(cr["preview"].get("schedule", [])),
            plan=(result or {}).get("plan") or cr["preview"].get("plan"),
            result=result,
        )


def _target_json(t: Target) -> dict[str, Any]:
    return {"id": t.id, "key": t.key, "state": t.state, "signature": t.signature, "row": t.row}


def _target_from(item: dict[str, Any]) -> Target:
    return Target(
        id=item["id"],
        key=item["key"],
        state=item["state"],
        signature=item["signature"],
        row={},
    )


def _aware(value: datetime) -> datetime:
    from services.estate.profile import as_utc

    out = as_utc(value)
    assert out is not None
    return out


def _hm(value: datetime | None) -> str:
    return _aware(value).strftime("%H:%M UTC") if value else "-"


def _nothing_to_do(kind: ChangeKind, selector: Selector, ineligible: list[Ineligible]) -> str:
    if not ineligible:
        return f"nothing to {kind.value}: no rows match {selector.describe()}"
    listed = "; ".join(f"{i.id}: {i.why}" for i in ineligible[:10])
    more = f" (and {len(ineligible) - 10} more)" if len(ineligible) > 10 else ""
    return f"nothing to {kind.value}: every row named is ineligible ({listed}{more})"
