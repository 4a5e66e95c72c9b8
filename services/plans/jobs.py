"""The plans' work in the background: a plan's tick (the scheduler's ``plan.tick``, one
per active or halted plan, run by ``PlanEngine.tick``) and the delivery of plan news to
chat (the outbox's ``plan.news``, by ``PlanPublisher.deliver``)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.outbox import Outbox
from services.plans import store
from services.plans.engine import PlanEngine
from services.plans.publish import PLAN_NEWS, PlanPublisher
from services.plans.store import TICK
from services.scheduler import Scheduler, SharedDeps


class Deps(SharedDeps, Protocol):
    @property
    def plans(self) -> PlanEngine: ...

    @property
    def plan_posts(self) -> PlanPublisher: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """A plan's news, and its ticks where a wave's changes commit with their audit
    events: in one database holding the queue's tables and queuebot's. At start, a
    halted plan whose tick an earlier version took away at the halt gets it back: a
    halted plan counts the rows it redrove until none is out, and a tick that finds
    nothing out stops."""
    outbox.register(PLAN_NEWS, deps.plan_posts.deliver)
    if not deps.one_database:
        return
    sched.register(TICK, deps.plans.tick)

    async def halted_plans_tick(conn: AsyncConnection, now: datetime) -> None:
        for plan in await store.halted(conn):
            await scheduler.ensure(conn, kind=TICK, subject=str(plan), due_at=now)

    sched.on_start(halted_plans_tick)
