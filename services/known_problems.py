"""A background loop's memory of the configuration problems it cannot fix by itself.

A queue whose table is missing fails every pass of the scheduler and of the outbox relay
until someone creates the table or fixes ``[queue]``. Each pass retries with backoff;
logging a traceback each time would bury the one line that says what to fix. So each
distinct problem is logged once, as one line, and again only while it lasts, at growing
intervals (a minute, two, four ... at most an hour), counting the failures in between.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.errors import QueuebotError

FIRST_REPEAT = 60.0  # seconds until a lasting problem is logged again
MAX_REPEAT = 3600.0


@dataclass
class _Seen:
    next_at: float
    gap: float
    since: int = 0  # failures not logged since it was last logged


class KnownProblems:
    def __init__(
        self, log: logging.Logger, what: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.log = log
        self.what = what
        self.clock = clock
        self._seen: dict[str, _Seen] = {}

    def report(self, exc: QueuebotError, *, doing: str) -> None:
        """One failure of ``doing`` because of ``exc``: logged as one line when it is new,
        or when it has lasted past its next reminder; otherwise only counted."""
        now = self.clock()
        seen = self._seen.get(exc.message)
        if seen is None:
            self._seen[exc.message] = _Seen(next_at=now + FIRST_REPEAT, gap=FIRST_REPEAT)
            self.log.error(
                "%s: %s failed: %s (retried with backoff; said again only if it lasts)",
                self.what,
                doing,
                exc.message,
            )
            return
        seen.since += 1
        if now < seen.next_at:
            return
        self.log.error(
            "%s: still failing (%d time(s) since last said): %s",
            self.what,
            seen.since,
            exc.message,
        )
        seen.gap = min(seen.gap * 2, MAX_REPEAT)
        seen.next_at = now + seen.gap
        seen.since = 0
