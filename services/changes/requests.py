"""Change requests: frozen when requested, approved by another person, executed exactly
once in the same transaction as the approval, the queue update and the audit.

Every public method of ``ChangeRequests`` is one use case: it opens and commits its own
transaction (database failures come out as ``DatabaseUnavailable``, saying whether
anything was committed) and never takes a connection. The steps it calls take that
connection: ``store``, the request's kind (its scope, its freeze; ``kinds.py``) and the
``Executor``, which runs the kind's change.

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
from services.changes.draft import Draft, keep_items, nothing_to_do, overridden
from services.changes.eligible import (
    ApproverStanding,
    Eligibility,
    OwnerApprovalNeeded,
    owner_basis,
    owners_line,
)
from services.changes.execute import Executor
from services.changes.kinds import Ask, Kind, Kinds
from services.changes.model import ChangeView, Decision, RequestRow, RequestState
from services.config import ApprovalConfig
from services.db import reading, transaction
from services.db.on_commit import FollowUp
from services.errors import (
    AlreadyApproved,
    OwnRequest,
    PermissionDenied,
    PreconditionFailed,
    RequestExpired,
)
from services.estate.estate import Estate
from services.estate.ops import Selector, Target
from services.ledger import Claim, complete_in, note_outcome


class ChangeRequests:
    def __init__(
        self,
        *,
        estate: Estate,
        engine: AsyncEngine,
        approval: ApprovalConfig,
        clock: Callable[[], datetime],
        kinds: Kinds,
        executor: Executor,
        audit: AuditTrail,
        approvers: Eligibility | None = None,
        after_commit: AfterCommit | None = None,
    ) -> None:
        self.audit = audit
        # the posts an approval makes; the approver's answer waits for them only briefly
        self.after_commit = after_commit or AfterCommit()
        # who holds the approver role, and who owns which queue (None: not known here,
        # nothing is checked)
        self.approvers = approvers
        self.kinds = kinds  # what each domain registered (its jobs.py)
        self.estate = estate
        self.engine = engine
        self.approval = approval
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
        kind: str,
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
        can = await self._others(actor.person)
        with collector_paused():
            async with transaction(self._writable(), subject=f"the {kind} request") as conn:
                await _done_with(conn, delivery, self.clock())
                asked = self._kind(kind)
                scope = await asked.scope(conn, selector, queue=queue, incident=incident)
                number = await self._request(
                    conn,
                    kind=asked,
                    queue=scope.queue,
                    selector=selector,
                    reason=reason,
                    actor=actor,
                    incident=scope.incident,
                    evidence=evidence,
                    origin=origin or {},
                    can=can,
                    incident_from=scope.incident_from,
                )
                await note_outcome(conn, delivery, f"CR-{number} requested")
                view = await store.view(conn, number)
        return await self._shown(view)

    async def approve(
        self,
        *,
        number: int,
        actor: Actor,
        delivery: Claim | None = None,
        standing: ApproverStanding = ApproverStanding(),  # noqa: B008  # frozen, never changed
    ) -> Decision:
        follow_ups: list[FollowUp] = []  # the posts its change makes, once it commits
        try:
            decision, request = await self._decide(
                number=number, actor=actor, delivery=delivery, standing=standing, follow=follow_ups
            )
        except OwnerApprovalNeeded as exc:  # named with who could, outside the lock
            raise await exc.named(self.approvers, str(actor.person)) from None
        if decision is None:  # it had expired: that much was committed
            raise RequestExpired(number=number, expired_at=request.expires_at)
        posts = await self.after_commit.run(follow_ups, what=f"approval of CR-{number}")
        return Decision(
            await self._shown(decision.view),
            decision.executed,
            decision.approvals,
            posts.failures,
            posts.pending,
        )

    async def _decide(
        self,
        *,
        number: int,
        actor: Actor,
        delivery: Claim | None,
        standing: ApproverStanding,
        follow: list[FollowUp],
    ) -> tuple[Decision | None, RequestRow]:
        """Approve in one transaction; no decision when the request had expired."""
        decision: Decision | None = None
        now = self.clock()
        with collector_paused():
            async with transaction(
                self._writable(), subject=f"CR-{number}", follow_ups=follow
            ) as conn:
                await _done_with(conn, delivery, now)
                request = await store.lock(conn, number)
                if request.state is not RequestState.PENDING:
                    raise await store.already_decided(conn, request)
                if now >= request.expires_at:
                    # committed all the same: the expiry is a fact, whatever became of it
                    await store.expire(conn, request, now, audit=self.audit)
                    await note_outcome(conn, delivery, f"CR-{number} had expired: not approved")
                else:
                    decision = await self._approve(conn, request, actor, now, standing)
                    await note_outcome(
                        conn,
                        delivery,
                        f"CR-{number} approved and executed"
                        if decision.executed
                        else f"your approval of CR-{number} recorded ({decision.approvals} so far)",
                    )
        return decision, request

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
            view = await store.view(conn, number)
        return self._said(view)

    async def pending(self, *, queue: str | None = None) -> list[ChangeView]:
        await self.expire_due()
        name = self.estate.profile(queue).queue if queue is not None else None
        async with reading(self.engine) as conn:
            views = [
                await store.view(conn, n) for n in await store.pending_numbers(conn, queue=name)
            ]
        return [self._said(v) for v in views]

    async def get(self, *, number: int) -> ChangeView:
        async with reading(self.engine) as conn:
            return self._said(await store.view(conn, number))

    async def expire_due(self) -> list[int]:
        """Mark every pending request past its expiry as expired (with an audit event)."""
        async with transaction(self._writable(), subject="expiring requests") as conn:
            return await store.expire_due(conn, now=self.clock(), audit=self.audit)

    # -- steps -----------------------------------------------------------------------

    async def _others(self, person: str, approved: Sequence[str] = ()) -> list[str] | None:
        """The approvers who could still approve a request of ``person`` (None: the
        people are not known here)."""
        names = None if self.approvers is None else await self.approvers.approver_names()
        return None if names is None else [n for n in names if n not in {person, *approved}]

    def _kind(self, name: str) -> Kind:
        kind = self.kinds.find(name)
        if kind is None:
            raise PreconditionFailed(f"this queuebot process takes no {name} requests")
        return kind

    def _said(self, view: ChangeView) -> ChangeView:
        """The request with what its kind says of it (its words, its domain's)."""
        kind = self.kinds.find(view.kind)
        if kind is None:  # a kind no domain here registers: the words of any request
            return view
        return replace(view, said=kind.words.said(view))

    async def _shown(self, view: ChangeView) -> ChangeView:
        """A request as its message shows it: what its kind says of it and, while it is
        pending, who may still approve it and what its quorum says (why more than one
        approval, and the other way out)."""
        kind = self.kinds.find(view.kind)
        if view.state is not RequestState.PENDING or kind is None:
            return self._said(view)
        can = await self._others(view.requester, view.approvals)
        note = quorum.note(
            self.approval,
            kind=kind,
            needed=view.approvals_required,
            rows=view.eligible,
            schedule=view.schedule,
        )
        line = await owners_line(self.approvers, view.queue, view.requester)
        if line is not None:
            note = f"{note} {line}" if note else line
        return self._said(replace(view, can_approve=tuple(can or ()), quorum_note=note))

    async def _request(
        self,
        conn: AsyncConnection,
        *,
        kind: Kind,
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
        """Freeze what the request will change (its kind's step), keep the rows as its
        items, judge its quorum and record it with its audit event. A kind that hands its
        rows over a page at a time (a staged redrive over a million dead letters) has each
        page kept as soon as it is checked: the request's row is written with the first
        page and completed after the last, and nothing is written when nothing is
        eligible or a check of the whole queue refuses it; a request no one can approve
        is refused after its pages were kept, and its transaction rolled back with them
        (on PostgreSQL its number is then never used)."""
        profile = self.estate.profile(queue)
        now = self.clock()
        draft = Draft(
            kind=kind.name,
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
        number: int | None = None
        written = 0

        async def keep(page: list[Target]) -> None:
            nonlocal number, written
            if number is None:
                number = await store.insert(conn, draft.row())
            await keep_items(conn, profile, number, page, first=written)
            written += len(page)

        asked = Ask(kind.name, profile, selector, reason, incident, actor.person, now)
        found = await kind.freeze(conn, asked, keep)
        if number is None and not found.targets and not kind.rowless:
            raise PreconditionFailed(
                nothing_to_do(kind.name, selector, found.ineligible, total=found.ineligible_count)
            )
        count = found.affected if found.affected is not None else len(found.targets)
        required = quorum.approvals(
            self.approval,
            kind=kind,
            count=count,
            schedule=found.schedule,
            actor=actor,
            can=can,
        )
        by_signature = found.by_signature
        if by_signature is None:
            by_signature = Counter(t.signature for t in found.targets).most_common()
        row = draft.row(
            count=count,
            required=required,
            ineligible=found.ineligible,
            by_signature=by_signature,
            checks=found.checks,
            schedule=found.schedule,
        )
        if number is None:
            number = await store.insert(conn, row)
        else:
            await store.complete(conn, number, row)
        kept: Digest | None = None
        if found.targets:
            # Every row's full image is kept as the request's items, and the hash-chained
            # audit event carries their digest: the rows never come through queuebot where
            # the database can copy them itself.
            kept = await keep_items(conn, profile, number, found.targets, first=written)
        # Kept in one go, the items are what that one write returned (the database
        # digests the rows its INSERT returns); kept a page at a time, they are read
        # back once the last page is in.
        snapshot = kept if kept is not None and not written else await kept_digest(conn, number)
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
                "kind": kind.name,
                "selector": draft.selected,
                "items": snapshot.as_json(),
                "snapshot_hash": snapshot.sha256,
                "ineligible": [[i.id, i.why] for i in found.ineligible],
                "approvals_required": required,
                **overridden(found.checks),
            },
        )
        return number

    async def _approve(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        actor: Actor,
        now: datetime,
        standing: ApproverStanding,
    ) -> Decision:
        number = request.id
        if actor.person == request.requester_person:
            raise OwnRequest(number=number)
        approvers = await store.approvers(conn, number)
        if actor.person in approvers:
            raise AlreadyApproved(
                number=number, missing=request.approvals_required - len(approvers)
            )
        basis = await owner_basis(conn, self.approvers, request, standing, len(approvers))
        await store.record_decision(conn, number, actor, "approve", now, basis)
        approvers.append(str(actor.person))
        await self.audit.append(
            conn,
            action="change.approved",
            actor=actor,
            at=now,
            subject=request.ref,
            queue=request.queue,
            incident=request.incident,
            details={
                "approvals": approvers,
                "required": request.approvals_required,
                "basis": basis,
            },
        )
        if len(approvers) < request.approvals_required:
            view = await store.view(conn, number)
            return Decision(view, executed=False, approvals=len(approvers))
        await self.executor.execute(conn, request, actor=actor, approvers=approvers, now=now)
        view = await store.view(conn, number)
        return Decision(view, executed=True, approvals=len(approvers))


async def _done_with(conn: AsyncConnection, delivery: Claim | None, now: datetime) -> None:
    """The delivery that asked for this change is done in the change's own transaction:
    both commit, or neither (a redelivery after a crash then acts exactly once)."""
    if delivery is not None:
        await complete_in(conn, delivery, now=now)
