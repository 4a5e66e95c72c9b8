"""Admission for estate reads: identical reads in flight are shared, fresh results are
reused for a moment, and only a few reads run at once.

During an incident many people type the same /queue triage within seconds; each one
would otherwise scan the same million rows, and the database would take every core
while the bot's event loop (which must acknowledge Slack within 3 s) waits for CPU.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class ReadGate:
    def __init__(self, *, concurrency: int = 3, fresh_for: float = 3.0) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._fresh_for = fresh_for
        self._inflight: dict[Hashable, asyncio.Task[Any]] = {}
        self._recent: dict[Hashable, tuple[float, Any]] = {}

    async def read(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        """``load()`` once for everyone asking ``key`` now or in the last moments. The load
        runs in a task of its own: a caller that gives up (cancelled) leaves it running
        for the others."""
        cached = self._recent.get(key)
        if cached is not None and time.monotonic() - cached[0] < self._fresh_for:
            return cached[1]  # type: ignore[no-any-return]
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(key, load))
            task.add_done_callback(_retrieve)
            self._inflight[key] = task
        return await asyncio.shield(task)

    async def _load(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        try:
            async with self._slots:
                result = await load()
        finally:
            del self._inflight[key]
        if self._fresh_for > 0:
            self._recent[key] = (time.monotonic(), result)
            if len(self._recent) > 256:
                self._prune()
        return result

    def forget(self) -> None:
        """Drop every kept result: the next read of each loads afresh."""
        self._recent.clear()

    def _prune(self) -> None:
        cutoff = time.monotonic() - self._fresh_for
        for key in [k for k, (at, _) in self._recent.items() if at < cutoff]:
            del self._recent[key]


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a failed load's exception as seen even when every caller had given up."""
    if not task.cancelled():
        task.exception()
