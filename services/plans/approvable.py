"""The plans' kinds of change request, registered by ``jobs.py``: a staged redrive
(``plan``: its candidates frozen a page at a time, its sample started on approval), the
resume of a halted plan and the rollback of a plan's unclaimed rows. Their words are
``messages.py``'s. Each step runs in the change request's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.changes.kinds import Ask, Done, Found, Keep, Kind, Scope
from services.changes.model import OVERRIDDEN, Executed, RequestRow
from services.config import RedriveConfig
from services.errors import NotFound
from services.estate.ops import Selector
from services.plans import store
from services.plans.candidates import freeze_plan, refused_or_shown
from services.plans.control import PlanControl
from services.plans.engine import PlanEngine
from services.plans.messages import ResumeWords, RollbackWords, StagedWords
from services.plans.model import ACTIVE, ItemState, PlanState

PLAN = "plan"  # a staged redrive: sample, then growing waves
RESUME = "resume"  # a halted plan goes on
ROLLBACK = "rollback"  # a plan's redriven, unclaimed jobs go back to dead


async def plan_scope(
    conn: AsyncConnection, selector: Selector, *, queue: str | None, incident: str | None
) -> Scope:
    """A request about a plan (a resume, a rollback) is made in the plan's queue and
    belongs to its incident, and so does a redrive of what a plan left dead again
    (``--from-plan``). A queue or an incident the person named is kept as they said."""
    plan = selector.plan if selector.plan is not None else selector.from_plan
    if plan is None:
        return Scope(queue, incident)
    if queue is None:
        queue = await store.queue_of(conn, plan)
    if incident is not None:
        return Scope(queue, incident)
    lent = await store.incident_of(conn, plan)
    return Scope(queue, lent, plan if lent is not None else None)


class _OfAPlan(Kind):
    async def scope(
        self, conn: AsyncConnection, selector: Selector, *, queue: str | None, incident: str | None
    ) -> Scope:
        return await plan_scope(conn, selector, queue=queue, incident=incident)


def _first_wave(rows: int, schedule: Sequence[int]) -> int:
    """A staged redrive is judged by its sample, a resume by its next wave: the rows each
    changes before a person can halt it (the first size of its frozen schedule)."""
    return schedule[0] if schedule else rows


class StagedRedrive(_OfAPlan):
    name = PLAN
    words = StagedWords()

    def __init__(self, *, engine: PlanEngine, redrive: RedriveConfig) -> None:
        self.engine = engine
        self.redrive = redrive

    def judged_rows(self, rows: int, schedule: Sequence[int]) -> int:
        return _first_wave(rows, schedule)

    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        """The candidates, frozen and checked a page at a time, each page's eligible rows
        handed to ``keep`` (see ``freeze_plan``); refused when a check of the whole queue
        fails."""
        await store.ensure_no_active_plan(conn, ask.profile.queue)
        found = await freeze_plan(
            conn,
            profile=ask.profile,
            selector=ask.selector,
            reason=ask.reason,
            config=self.redrive,
            now=ask.now,
            keep=keep,
            requester=ask.requester,
        )
        checks = refused_or_shown(PLAN, found.refusal, found.checks)
        return Found(
            [],
            found.excluded,
            checks=checks,
            schedule=found.schedule,
            affected=found.eligible,
            by_signature=found.by_signature,
            ineligible_count=found.excluded_count,
        )

    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> Done:
        plan = await self.engine.start(
            conn,
            request=request.id,
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
        return Done(Executed(approvers=approvers, plan=plan))


class Resume(_OfAPlan):
    name = RESUME
    rowless = True
    words = ResumeWords()

    def __init__(self, *, control: PlanControl) -> None:
        self.control = control

    def judged_rows(self, rows: int, schedule: Sequence[int]) -> int:
        return _first_wave(rows, schedule)

    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        """No rows are frozen. What it changes before anyone can halt it again is its
        first wave: the one the plan's schedule gives next (past the schedule, the plan's
        largest), at most what is left. The quorum judges it by that, as a plan by its
        sample."""
        number = _plan_of(ask)
        plan = await store.require(conn, number=number, states=(PlanState.HALTED,), action="resume")
        _in_queue(plan.queue, ask, number)
        view = await store.view(conn, number)
        left = view.total - view.redriven
        following = len(view.waves)
        size = view.schedule[following] if following < len(view.schedule) else plan.max_wave
        return Found([], [], schedule=[min(size, left)] if left else [], affected=left)

    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> Done:
        plan = _named(request)
        await self.control.resume(conn, number=plan, actor=actor, request=request.id, now=now)
        return Done(Executed(approvers=approvers, plan=plan))


class Rollback(_OfAPlan):
    name = ROLLBACK
    rowless = True
    words = RollbackWords()

    def __init__(self, *, control: PlanControl) -> None:
        self.control = control

    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        """No rows are frozen: the rows it would return now, each checked in the queue,
        not the plan's redriven rows whose outcome is not counted yet."""
        number = _plan_of(ask)
        plan = await store.require(conn, number=number, states=ACTIVE, action="roll back")
        _in_queue(plan.queue, ask, number)
        out = await store.items_in(conn, number, state=ItemState.REDRIVEN)
        unclaimed = await ask.profile.plan_ops.unclaimed(conn, items=store.refs(out))
        return Found([], [], affected=len(unclaimed))

    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> Done:
        plan = _named(request)
        back = await self.control.rollback(
            conn, number=plan, actor=actor, request=request.id, now=now
        )
        return Done(Executed(approvers=approvers, plan=plan, changed=back))


def _plan_of(ask: Ask) -> int:
    if ask.selector.plan is None:
        raise ValueError(f"a {ask.kind} request names its plan")
    return ask.selector.plan


def _in_queue(queue: str, ask: Ask, number: int) -> None:
    if queue != ask.profile.queue:
        raise NotFound(f"P-{number} belongs to queue {queue}; add --queue {queue}")


def _named(request: RequestRow) -> int:
    if request.selector.plan is None:
        raise ValueError(f"{request.ref}: a {request.kind} request names no plan or incident here")
    return request.selector.plan
