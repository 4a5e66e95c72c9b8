"""The background work of a process that runs it (serve or its worker, a console): the
durable scheduler, the outbox relay and alert processing, beside the adapters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.bootstrap import App


@asynccontextmanager
async def running_scheduler(app: App) -> AsyncIterator[None]:
    """Run the durable scheduler, the outbox relays and alert processing beside the
    adapters for as long as the block lasts."""
    await app.scheduler.seed()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(app.alerts.run_forever(stop))]
    # posts that still have to go out: one relay keeps many going, a channel's at a time
    tasks.append(asyncio.create_task(app.outbox.run_forever(stop)))
    if app.scheduler.handlers:
        tasks.append(asyncio.create_task(app.scheduler.run_forever(stop)))
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)
