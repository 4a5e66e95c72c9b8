"""The plans' work in the background: a plan's tick (the scheduler's ``plan.tick``, one
per active or halted plan, run by ``PlanEngine.tick``) and the delivery of plan news to
chat (the outbox's ``plan.news``, by ``PlanPublisher.deliver``); and the plans' kinds of
change request (a staged redrive, a resume, a rollback: ``approvable.py``)."""

from __future__ import annotations

from datetime import datetime

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
from services.scheduler import Scheduler


def register(
    sched: Scheduler,
    outbox: Outbox,
    kinds: Kinds,
    *,
    plans: PlanEngine,
    control: PlanControl,
    publisher: PlanPublisher,
    ticks: bool = True,
) -> None:
    """The plans' kinds of change request; a plan's news, and with ``ticks`` its ticks:
    only where a wave's changes commit with their audit events, in one database holding
    the queue's tables and queuebot's. At start, a halted plan whose tick an earlier
    version took away at the halt gets it back: a halted plan counts the rows it redrove
    until none is out, and a tick that finds nothing out stops."""
    kinds.register(StagedRedrive(engine=plans, redrive=plans.config))
    kinds.register(Resume(control=control))
    kinds.register(Rollback(control=control))
    outbox.register(PLAN_NEWS, publisher.deliver)
    if not ticks:
        return
    sched.register(TICK, plans.tick)

    async def halted_plans_tick(conn: AsyncConnection, now: datetime) -> None:
        for plan in await store.halted(conn):
            await scheduler.ensure(conn, kind=TICK, subject=str(plan), due_at=now)

    sched.on_start(halted_plans_tick)
