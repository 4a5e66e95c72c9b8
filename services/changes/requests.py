"""Change requests: frozen when requested, approved by another person, executed exactly
once in the same transaction as the approval, the queue update and the audit.

Every public method of ``ChangeRequests`` is one use case: it opens and commits its own
transaction (database failures come out as ``DatabaseUnavailable``, saying whether
anything was committed) and never takes a connection. The steps it calls take that
connection: ``store``, ``freeze``, ``Executor`` and the plan steps below them.

Every decision on a request starts by locking its row, which serialises approvers, and
the pending -> executed transition is conditional on ``state = 'pending'``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.after_commit import AfterCommit
from services.audit import Actor, AuditTrail
from services.audit.row_digest import Digest, kept_digest
from services.changes import quorum, store
from services.changes.collector import collector_paused
from services.changes.draft import Draft, incident_of, keep_items, overridden
from services.changes.execute import Executor
from services.changes.freeze import freeze, freeze_plan_items, nothing_to_do
from services.changes.model import (
    ChangeKind,
    ChangeView,
    Decision,
    IncidentOverrides,
    RequestRow,
    RequestState,
)
from services.config import ApprovalConfig, RedriveConfig
from services.db import reading, transaction
from services.errors import (
    AlreadyApproved,
    OwnRequest,
    PermissionDenied,
    PreconditionFailed,
    RequestExpired,
)
from services.estate.estate import Estate
from services.estate.ops import Ineligible, Selector, Target
from services.ledger import Claim, complete_in, note_outcome
from services.plans import store as plan_store


class ChangeRequests:
    def __init__(
        self,
        *,
        estate: Estate,
        engine: AsyncEngine,
        approval: ApprovalConfig,
        redrive: RedriveConfig,
        clock: Callable[[], datetime],
        executor: Executor,
        audit: AuditTrail,
        incidents: IncidentOverrides | None = None,
        approvers: Callable[[], Sequence[str]] | None = None,
        after_commit: AfterCommit | None = None,
    ) -> None:
        self.audit = audit
        # the posts an approval makes; the approver's answer waits for them only briefly
        self.after_commit = after_commit or AfterCommit()
        # the people with the approver role (None: not known here, nothing is checked)
        self.approvers = approvers
        self.incidents = incidents  # None: no incidents here, so no resolve requests
        self.estate = estate
        self.engine = engine
        self.approval = approval
        self.redrive = redrive
        self.clock = clock
        self.executor = executor

    def _writable(self) -> AsyncEngine:
        if self.estate.engine.url != self.engine.url:
            raise PreconditionFailed(
                "this queuebot is read-only: its own tables and the queue are in different "
                "databases, and a change and its audit event must commit in one "
                "transaction. Point QUEUEBOT_DATABASE_URL at the queue's database "
                "(queuebot's tables are prefixed qb_) and unset QUEUEBOT_QUEUE_DATABASE_URL; "
                "`queuebot config check` says so too."
            )
        return self.engine

    # -- use cases -------------------------------------------------------------------

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
        delivery: Claim | None = None,
    ) -> ChangeView:
        if actor.person is None:
            raise PermissionDenied("only people listed under [people] may request changes")
        can = self._others(actor.person)
        with collector_paused():
            async with transaction(self._writable(), subject=f"the {kind.value} request") as conn:
                await _done_with(conn, delivery, self.clock())
                if selector.plan is not None and queue is None:
                    queue = await plan_store.queue_of(conn, selector.plan)
                if selector.from_plan is not None and queue is None:  # the plan's queue
                    queue = await plan_store.queue_of(conn, selector.from_plan)
                incident, lent = await incident_of(conn, selector, incident)
                number = await self._request(
                    conn,
                    kind=kind,
                    queue=queue,
                    selector=selector,
                    reason=reason,
                    actor=actor,
                    incident=incident,
                    evidence=evidence,
                    origin=origin or {},
                    can=can,
                    incident_from=lent,
                )
                await note_outcome(conn, delivery, f"CR-{number} requested")
                view = await store.view(conn, number)
        return self._shown(view)

    async def approve(
        self, *, number: int, actor: Actor, delivery: Claim | None = None
    ) -> Decision:
        now = self.clock()
        with collector_paused():
            async with transaction(self._writable(), subject=f"CR-{number}") as conn:
                await _done_with(conn, delivery, now)
                request = await store.lock(conn, number)
                if request.state is not RequestState.PENDING:
                    raise await store.already_decided(conn, request)
                expired = now >= request.expires_at
                if expired:
                    # committed all the same: the expiry is a fact, whatever became of it
                    await store.expire(conn, request, now, audit=self.audit)
                    await note_outcome(conn, delivery, f"CR-{number} had expired: not approved")
                else:
                    decision, follow_ups = await self._approve(conn, request, actor, now)
                    await note_outcome(
                        conn,
                        delivery,
                        f"CR-{number} approved and executed"
                        if decision.executed
                        else f"your approval of CR-{number} recorded ({decision.approvals} so far)",
                    )
        if expired:
            raise RequestExpired(number=number, expired_at=request.expires_at)
        posts = await self.after_commit.run(follow_ups, what=f"approval of CR-{number}")
        return Decision(
            self._shown(decision.view),
            decision.executed,
            decision.approvals,
            posts.failures,
            posts.pending,
        )

    async def reject(
        self,
        *,
        number: int,
        actor: Actor,
        reason: str | None,
        may_reject_others: bool,
        delivery: Claim | None = None,
    ) -> ChangeView:
        now = self.clock()
        async with transaction(self._writable(), subject=f"CR-{number}") as conn:
            await _done_with(conn, delivery, now)
            request = await store.lock(conn, number)
            if request.state is not RequestState.PENDING:
                raise await store.already_decided(conn, request)
            own = actor.person == request.requester_person
            if not own and not may_reject_others:
                raise PermissionDenied(f"only an approver or the requester may reject CR-{number}")
            await store.move(
                conn,
                number,
                to=RequestState.REJECTED,
                now=now,
                result={"rejected_by": actor.person, "reason": reason, "withdrawn": own},
            )
            await store.record_decision(conn, number, actor, "reject", now)
            await self.audit.append(
                conn,
                action="change.rejected",
                actor=actor,
                at=now,
                subject=request.ref,
                queue=request.queue,
                incident=request.incident,
                reason=reason,
                details={"withdrawn": own},
            )
            await note_outcome(conn, delivery, f"CR-{number} {'withdrawn' if own else 'rejected'}")
            return await store.view(conn, number)

    async def pending(self, *, queue: str | None = None) -> list[ChangeView]:
        await self.expire_due()
        name = self.estate.profile(queue).queue if queue is not None else None
        async with reading(self.engine) as conn:
            return [
                await store.view(conn, n) for n in await store.pending_numbers(conn, queue=name)
            ]

    async def get(self, *, number: int) -> ChangeView:
        async with reading(self.engine) as conn:
            return await store.view(conn, number)

    async def expire_due(self) -> list[int]:
        """Mark every pending request past its expiry as expired (with an audit event)."""
        async with transaction(self._writable(), subject="expiring requests") as conn:
            return await store.expire_due(conn, now=self.clock(), audit=self.audit)

    # -- steps -----------------------------------------------------------------------

    def _others(self, person: str, approved: Sequence[str] = ()) -> list[str] | None:
        """The approvers who could still approve a request of ``person`` (None: the
        people are not known here)."""
        if self.approvers is None:
            return None
        return [name for name in self.approvers() if name != person and name not in approved]

    def _shown(self, view: ChangeView) -> ChangeView:
        """A pending request as its message shows it: who may still approve it and what
        its quorum says (why more than one approval, and the other way out)."""
        if view.state is not RequestState.PENDING:
            return view
        can = self._others(view.requester, view.approvals)
        note = quorum.note(
            self.approval,
            kind=view.kind,
            needed=view.approvals_required,
            rows=view.eligible,
            schedule=view.schedule,
        )
        return replace(view, can_approve=tuple(can or ()), quorum_note=note)

    async def _request(
        self,
        conn: AsyncConnection,
        *,
        kind: ChangeKind,
        queue: str | None,
        selector: Selector,
        reason: str,
        actor: Actor,
        incident: str | None,
        evidence: str | None,
        origin: dict[str, Any],
        can: Sequence[str] | None = None,
        incident_from: int | None = None,
    ) -> int:
        profile = self.estate.profile(queue)
        now = self.clock()
        draft = Draft(
            kind=kind,
            profile=profile,
            now=now,
            expiry=timedelta(minutes=self.approval.expiry_minutes),
            actor=actor,
            reason=reason,
            incident=incident,
            evidence=evidence,
            selector=selector,
            origin=origin,
            incident_from=incident_from,
        )
        if kind is ChangeKind.PLAN:
            number, snapshot, required, checks, ineligible = await self._request_plan(
                conn, draft, can
            )
        else:
            frozen = await freeze(
                conn,
                redrive=self.redrive,
                now=now,
                kind=kind,
                profile=profile,
                selector=selector,
                reason=reason,
                incident=incident,
                incidents=self.incidents,
                requester=actor.person,
            )
            rowless = (ChangeKind.RESUME, ChangeKind.ROLLBACK, ChangeKind.RESOLVE)
            if not frozen.targets and kind not in rowless:
                raise PreconditionFailed(nothing_to_do(kind, selector, frozen.ineligible))
            count = frozen.affected if frozen.affected is not None else len(frozen.targets)
            required = quorum.approvals(
                self.approval,
                kind=kind,
                count=count,
                schedule=frozen.schedule,
                actor=actor,
                can=can,
            )
            by_signature = Counter(t.signature for t in frozen.targets).most_common()
            number = await store.insert(
                conn,
                draft.row(
                    count=count,
                    required=required,
                    ineligible=frozen.ineligible,
                    by_signature=by_signature,
                    checks=frozen.checks,
                    schedule=frozen.schedule,
                ),
            )
            # Every row's full image is kept as the request's items, and the hash-chained
            # audit event carries their digest: the rows never come through queuebot where
            # the database can copy them itself.
            await keep_items(conn, profile, number, frozen.targets)
            snapshot = await kept_digest(conn, number)
            checks = frozen.checks
            ineligible = frozen.ineligible
        await store.set_snapshot_hash(conn, number, snapshot.sha256)
        await self.audit.append(
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
                "selector": draft.selected,
                "items": snapshot.as_json(),
                "snapshot_hash": snapshot.sha256,
                "ineligible": [[i.id, i.why] for i in ineligible],
                "approvals_required": required,
                **overridden(checks),
            },
        )
        return number

    async def _request_plan(
        self, conn: AsyncConnection, draft: Draft, can: Sequence[str] | None
    ) -> tuple[int, Digest, int, list[tuple[str, str, str]], list[Ineligible]]:
        """A staged redrive's request: its candidates frozen a page at a time, each page
        kept as the request's items as soon as it is checked (the request's row is written
        with the first page and completed after the last), so a plan over a million dead
        letters never holds them all. Nothing is written when nothing is eligible or a
        check of the whole queue refuses it; a plan no one can approve is refused after
        its pages were kept, and its transaction rolled back with them (on PostgreSQL its
        number is then never used)."""
        profile, selector = draft.profile, draft.selector
        number: int | None = None
        written = 0

        async def keep(page: list[Target]) -> None:
            nonlocal number, written
            if number is None:
                number = await store.insert(conn, draft.row())
            await keep_items(conn, profile, number, page, first=written)
            written += len(page)

        found = await freeze_plan_items(
            conn,
            redrive=self.redrive,
            now=draft.now,
            profile=profile,
            selector=selector,
            reason=draft.reason,
            keep=keep,
            requester=draft.actor.person,
        )
        if number is None:
            raise PreconditionFailed(
                nothing_to_do(draft.kind, selector, found.excluded, total=found.excluded_count)
            )
        checks = [(c.name, c.verdict, c.detail) for c in found.checks]
        required = quorum.approvals(
            self.approval,
            kind=draft.kind,
            count=found.eligible,
            schedule=found.schedule,
            actor=draft.actor,
            can=can,
        )
        await store.complete(
            conn,
            number,
            draft.row(
                count=found.eligible,
                required=required,
                ineligible=found.excluded,
                by_signature=found.by_signature,
                checks=checks,
                schedule=found.schedule,
            ),
        )
        return number, await kept_digest(conn, number), required, checks, found.excluded

    async def _approve(
        self, conn: AsyncConnection, request: RequestRow, actor: Actor, now: datetime
    ) -> tuple[Decision, list[Any]]:
        number = request.id
        if actor.person == request.requester_person:
            raise OwnRequest(number=number)
        approvers = await store.approvers(conn, number)
        if actor.person in approvers:
            raise AlreadyApproved(
                number=number, missing=request.approvals_required - len(approvers)
            )
        await store.record_decision(conn, number, actor, "approve", now)
        approvers.append(str(actor.person))
        await self.audit.append(
            conn,
            action="change.approved",
            actor=actor,
            at=now,
            subject=request.ref,
            queue=request.queue,
            incident=request.incident,
            details={"approvals": approvers, "required": request.approvals_required},
        )
        if len(approvers) < request.approvals_required:
            view = await store.view(conn, number)
            return Decision(view, executed=False, approvals=len(approvers)), []
        follow_ups = await self.executor.execute(
            conn, request, actor=actor, approvers=approvers, now=now
        )
        view = await store.view(conn, number)
        return Decision(view, executed=True, approvals=len(approvers)), follow_ups


async def _done_with(conn: AsyncConnection, delivery: Claim | None, now: datetime) -> None:
    """The delivery that asked for this change is done in the change's own transaction:
    both commit, or neither (a redelivery after a crash then acts exactly once)."""
    if delivery is not None:
        await complete_in(conn, delivery, now=now)
