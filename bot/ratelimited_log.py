"""A log line that strangers can cause, rate-limited: a flood of bad requests must not
become a flood of log lines (nor of tracebacks).

The first ``burst`` lines in a window (a minute by default) are logged as they come; the
rest are only counted, and reported as one line ("suppressed K more") when the window
ends: from a timer on the running event loop, or else with the next line after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        what: str,
        burst: int = 10,
        window: float = 60.0,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what  # names the lines in the summary, e.g. "refused HTTP requests"
        self.burst = burst
        self.window = window
        self.level = level
        self.clock = clock
        self._started: float | None = None
        self._logged = 0
        self._suppressed = 0
        self._timer: asyncio.TimerHandle | None = None

    def __call__(self, msg: str, *args: object) -> None:
        """Log one line, unless this window's burst is spent: then count it."""
        now = self.clock()
        if self._started is not None and now - self._started >= self.window:
            self.flush()
        if self._started is None:
            self._started = now
        if self._logged < self.burst:
            self._logged += 1
            self.logger.log(self.level, msg, *args)
            return
        self._suppressed += 1
        if self._suppressed == 1:
            self._flush_later(self._started + self.window - now)

    def flush(self) -> None:
        """End the window: say how many lines were left out, if any."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._suppressed:
            self.logger.log(
                self.level,
                "%s: suppressed %d more in the last %g s",
                self.what,
                self._suppressed,
                self.window,
            )
        self._started = None
        self._logged = self._suppressed = 0

    def _flush_later(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: the next line after the window reports them
            return
        self._timer = loop.call_later(max(delay, 0.0), self.flush)
