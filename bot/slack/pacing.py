"""Slack takes about one message per second per channel: posts to one channel are
spaced by ``interval``, while posts to other channels go on. A 429 that comes anyway is
waited out by the Web client's rate-limit handler (Retry-After)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class ChannelPacer:
    def __init__(
        self, interval: float = 1.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._last: dict[str, float] = {}

    @asynccontextmanager
    async def turn(self, channel: str) -> AsyncIterator[None]:
        """Wait for the channel's turn, post inside the block; the next post to the
        channel waits ``interval`` from the end of this one."""
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            last = self._last.get(channel)
            if last is not None:
                wait = last + self.interval - self.clock()
                if wait > 0:
                    await asyncio.sleep(wait)
            try:
                yield
            finally:
                self._last[channel] = self.clock()
                if len(self._last) > 10_000:  # channels long quiet need no memory
                    cutoff = self.clock() - self.interval
                    for name in [c for c, t in self._last.items() if t < cutoff]:
                        self._last.pop(name, None)
                        held = self._locks.get(name)
                        if held is not None and not held.locked():
                            self._locks.pop(name, None)
