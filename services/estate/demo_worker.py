"""A simulated worker for ``queuebot demo``, so a newcomer can watch a staged redrive go
sample -> waves -> done, and see a plan halt on a job that dead-letters again.

It takes the jobs queuebot put back in the demo's queues (redriven or requeued) once they
have waited ``delay``, and after another ``delay`` finishes them: most succeed, and the
ones the demo's story says are still broken fail again with their original error.

What a pass does on a queue is its profile's demo (``ProfileDemo.work`` in
``<profile>/demo.py``): message_job's ``clips`` dead-letter again on "upstream timeout",
worker_queue's ``workers`` fail again for job type ``continue-issue``.

The demo's own backlog (its pending, stuck and duplicate rows) is left as it was built, so
``/queue triage`` keeps showing it. Which jobs fail is fixed, so a run can be repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from services.estate.demo_kit import Pass
from services.estate.estate import Estate

log = logging.getLogger("queuebot.demo.worker")

DELAY = 2.0  # seconds a job waits to be claimed, and then to finish


class DemoWorker:
    def __init__(
        self,
        estate: Estate,
        *,
        delay: float = DELAY,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.estate = estate
        self.delay = delay
        self.timer = timer
        self._seen: dict[tuple[str, str, str], float] = {}  # (queue, row, state) -> first seen
        self.fixed: set[str] = set()  # the demo's faults whose fix is "deployed"

    def faults(self) -> dict[str, str]:
        """The demo's standing faults (name -> what is broken), from every demo queue."""
        found: dict[str, str] = {}
        for profile in self.estate.profiles.values():
            demo = profile.demo()
            if demo is not None:
                found.update(demo.faults)
        return found

    def _due(self, queue: str, row: str, state: str) -> bool:
        """Whether ``row`` has been in ``state`` for ``delay`` (first sight starts it)."""
        first = self._seen.setdefault((queue, row, state), self.timer())
        return self.timer() - first >= self.delay

    async def step(self) -> Pass:
        """One pass over every demo queue, in one transaction per queue."""
        done = Pass()
        for profile in self.estate.profiles.values():
            demo = profile.demo()
            if demo is None:
                continue
            async with self.estate.engine.begin() as conn:
                await demo.work(
                    conn,
                    now=self.estate.clock(),
                    due=self._due,
                    done=done,
                    fixed=frozenset(self.fixed),
                )
        return done

    async def run_forever(self, stop: asyncio.Event, interval: float = 0.5) -> None:
        while not stop.is_set():
            try:
                done = await self.step()
                if not done.idle:
                    log.info("demo worker: %s", done)
            except Exception:  # a demo helper: never take the console down
                log.exception("demo worker pass failed; trying again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
