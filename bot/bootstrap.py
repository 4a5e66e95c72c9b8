"""The one wiring place: settings -> engines -> services -> router -> adapters.

Nothing is built at import time; ``build_app`` does it all, in this order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from commands.deps import Deps
from commands.router import Router
from services import housekeeping_jobs as jobs
from services.changes.ops import changes_for
from services.changes.requests import ChangeRequests
from services.config import Config
from services.db import create_engine, redacted
from services.estate.estate import Estate, utcnow
from services.ledger import DeliveryLedger
from services.migrate import upgrade
from services.notify import Notifier
from services.people import Directory
from services.plans.engine import PlanEngine
from services.queue_reads import QueueReads
from services.read_gate import ReadGate
from services.scheduler import Scheduler

log = logging.getLogger("queuebot")


@dataclass
class App:
    config: Config
    state_engine: AsyncEngine
    estate: Estate
    directory: Directory
    router: Router
    ledger: DeliveryLedger
    scheduler: Scheduler
    plans: PlanEngine
    _engines: list[AsyncEngine] = field(default_factory=list)

    async def close(self) -> None:
        for engine in self._engines:
            await engine.dispose()


async def build_app(
    config: Config,
    *,
    clock: Callable[[], datetime] = utcnow,
    migrate: bool = True,
    notifier: Notifier | None = None,
) -> App:
    state_url, estate_url = config.env.state_url, config.env.estate_url
    state_engine = create_engine(state_url)
    engines = [state_engine]
    if estate_url == state_url and state_engine.dialect.name == "sqlite":
        estate_engine = state_engine  # one file, one writer: one pool
    else:
        # Reads get a pool of their own, so a burst of triage never makes the delivery
        # ledger or an approval wait for a connection (same database or not).
        estate_engine = create_engine(estate_url)
        engines.append(estate_engine)
    try:
        if migrate:
            revision = await upgrade(state_engine)
            log.info("queuebot state at %s is at revision %s", redacted(state_url), revision)
        estate = Estate(engine=estate_engine, queues=config.queues, clock=clock)
        directory = Directory.from_config(config.file)
        plans = PlanEngine(
            estate=estate,
            engine=state_engine,
            config=config.file.redrive,
            clock=clock,
            changes_for=changes_for,
            notifier=notifier,
        )
        changes = ChangeRequests(
            estate=estate,
            state_engine=state_engine,
            approval=config.file.approval,
            clock=clock,
            plans=plans,
        )
        sched = Scheduler(engine=state_engine, clock=clock)
        if estate_url == state_url:  # plans and samples live beside the queue
            jobs.register(sched, estate=estate, changes=changes, plans=plans)
        deps = Deps(
            reads=QueueReads(
                estate,
                gate=ReadGate(
                    concurrency=config.file.reads.concurrency,
                    fresh_for=config.file.reads.fresh_seconds,
                ),
            ),
            changes=changes,
            plans=plans,
            directory=directory,
            access=config.file.access,
        )
        return App(
            config=config,
            state_engine=state_engine,
            estate=estate,
            directory=directory,
            router=Router(deps),
            ledger=DeliveryLedger(engine=state_engine, clock=clock),
            scheduler=sched,
            plans=plans,
            _engines=engines,
        )
    except BaseException:
        for engine in engines:
            await engine.dispose()
        raise


@asynccontextmanager
async def running_scheduler(app: App) -> AsyncIterator[None]:
    """Run the durable scheduler beside the adapters for as long as the block lasts."""
    if not app.scheduler.handlers:
        yield
        return
    await jobs.seed(app.state_engine, estate=app.estate, clock=app.scheduler.clock)
    stop = asyncio.Event()
    task = asyncio.create_task(app.scheduler.run_forever(stop))
    try:
        yield
    finally:
        stop.set()
        await task
