"""The plans' work in the background: a plan's tick (the scheduler's ``plan.tick``, one
per active or halted plan, run by ``PlanEngine.tick``) and the delivery of plan news to
chat (the outbox's ``plan.news``, by ``PlanPublisher.post``); and the plans' kinds of
change request (a staged redrive, a resume, a rollback: ``approvable.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.changes.kinds import Kinds
from services.outbox import Outbox
from services.plans import store
from services.plans.approvable import Resume, Rollback, StagedRedrive
from services.plans.control import PlanControl
from services.plans.engine import PlanEngine
from services.plans.publish import PLAN_NEWS, PlanPublisher
from services.plans.store import TICK
from services.scheduler import Scheduler, SharedDeps


class Deps(SharedDeps, Protocol):
    @property
    def plans(self) -> PlanEngine: ...

    @property
    def plan_control(self) -> PlanControl: ...

    @property
    def plan_posts(self) -> PlanPublisher: ...

    @property
    def kinds(self) -> Kinds: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """The plans' kinds of change request; a plan's news, and its ticks where a wave's
    changes commit with their audit events: in one database holding the queue's tables
    and queuebot's. At start, a halted plan whose tick an earlier version took away at
    the halt gets it back: a halted plan counts the rows it redrove until none is out,
    and a tick that finds nothing out stops."""
    deps.kinds.register(StagedRedrive(engine=deps.plans, redrive=deps.plans.config))
    deps.kinds.register(Resume(control=deps.plan_control))
    deps.kinds.register(Rollback(control=deps.plan_control))
    outbox.register(PLAN_NEWS, deps.plan_posts.post)
    if not deps.one_database:
        return
    sched.register(TICK, deps.plans.tick)

    async def halted_plans_tick(conn: AsyncConnection, now: datetime) -> None:
        for plan in await store.halted(conn):
            await scheduler.ensure(conn, kind=TICK, subject=str(plan), due_at=now)

    sched.on_start(halted_plans_tick)
