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
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}
        self._recent: dict[Hashable, tuple[float, Any]] = {}

    async def read(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        """``load()`` once for everyone asking ``key`` now or in the last moments."""
        now = time.monotonic()
        cached = self._recent.get(key)
        if cached is not None and now - cached[0] < self._fresh_for:
            return cached[1]  # type: ignore[no-any-return]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            async with self._slots:
                result = await load()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark it retrieved: waiters re-raise it themselves
            raise
        else:
            future.set_result(result)
            self._recent[key] = (time.monotonic(), result)
            if len(self._recent) > 256:
                self._prune()
            return result
        finally:
            del self._inflight[key]

    def _prune(self) -> None:
        cutoff = time.monotonic() - self._fresh_for
        for key in [k for k, (at, _) in self._recent.items() if at < cutoff]:
            del self._recent[key]
