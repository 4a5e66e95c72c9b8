"""Finishing what a dead process acknowledged: the ledger's orphans, adopted and done.

Slack and Discord never send again a slash command or a click they saw acknowledged, so
each adapter writes down what a delivery asks, and where to answer it, before its ack
(services/ledger/__init__.py). A process that dies after the ack leaves the row claimed and
unanswered; once its claim has gone unrefreshed for the ledger's staleness (10 s by
default), every live ``serve`` finds it here within a sweep (every 2 s), exactly one
adopts it, and the platform's ``resume`` finishes it: the work is done (a change still
acts at most once) or, where the change had committed, the person is told what it did.
The answer goes where the platform still takes it (Slack's response_url for 30 minutes,
Discord's token for 15), else to the channel, mentioning the person. Each adoption is
counted in the ledger row; work whose process died every time it ran (a command that
runs the process out of memory) is, past the ledger's ``MAX_ADOPTIONS``, answered that
it failed and was not retried instead of taking down one replica after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bot.ratelimited_log import RateLimitedLog
from services.ledger import HEARTBEAT, DeliveryLedger, Orphan

log = logging.getLogger("queuebot.recovery")
Resume = Callable[[Orphan], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Platform:
    """One chat platform's way to finish an orphan: its ledger keys start with
    ``prefix``; ``ready`` says whether it can answer now (Discord's gateway connected)."""

    prefix: str
    resume: Resume
    ready: Callable[[], bool] = lambda: True


@dataclass
class Recovery:
    ledger: DeliveryLedger
    platforms: list[Platform]
    interval: float = HEARTBEAT
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    failing: RateLimitedLog = field(
        default_factory=lambda: RateLimitedLog(log, what="sweeps for orphaned deliveries failed")
    )

    async def sweep(self) -> int:
        """Adopt what the platforms that can answer now left orphaned, and start finishing
        each in a task of its own; the number adopted."""
        ready = [p for p in self.platforms if p.ready()]
        if not ready:
            return 0
        orphans = await self.ledger.adopt_orphans(prefixes=tuple(p.prefix for p in ready))
        for orphan in orphans:
            platform = next(p for p in ready if orphan.claim.key.startswith(p.prefix))
            task = asyncio.create_task(platform.resume(orphan))
            self.tasks.add(task)
            task.add_done_callback(self._finished)
        return len(orphans)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("finishing an orphaned delivery failed", exc_info=task.exception())

    async def run_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # the database is away: the next sweep tries again
                self.failing("could not look for orphaned deliveries: %s", type(exc).__name__)
            await asyncio.sleep(self.interval)

    @contextlib.asynccontextmanager
    async def running(self, grace: float = 10.0) -> AsyncIterator[None]:
        """Sweep while the body runs; on the way out, let what was adopted finish."""
        sweeping = asyncio.create_task(self.run_forever())
        try:
            yield
        finally:
            sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeping
            if self.tasks:
                await asyncio.wait(set(self.tasks), timeout=grace)
