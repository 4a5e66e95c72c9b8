"""SQLite's one writer, taken in turn within a process, acknowledgements first.

SQLite lets one connection write at a time. Left to SQLite, a connection that finds the
file locked sleeps and tries again, sleeping longer each time (1, 2, 5 ... 100 ms, then
100 ms a try, up to ``busy_timeout``), so under a burst a short write (a delivery written
down before its acknowledgement) kept waking to find another writer had taken the lock
meanwhile: measured, Discord's first response waited up to 1.3 s on it with 20
interactions in flight. Here the write transactions of one process queue for the lock in
the order they asked, except that a write an acknowledgement waits for (``first``) goes
before every other waiting one: Slack and Discord give 3 s for the ack, an answer has
minutes (a burst of acknowledgements may so hold other writers back, up to ``WAIT``).
SQLite's own waiting remains between processes (serve's front and its worker).
PostgreSQL needs none of this.

A transaction whose turn does not come within ``WAIT`` (SQLite's ``busy_timeout``) is
refused as SQLite would refuse it: the database is locked.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Callable

from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

WAIT = 10.0  # seconds, as PRAGMA busy_timeout


class WriterBusy(Exception):
    """The process's turn to write did not come within ``WAIT``."""


class _Turns:
    """One engine's writers in one event loop: one at a time, ``first`` ones first, each
    kind in the order it asked."""

    def __init__(self) -> None:
        self.busy = False
        self.waiting: dict[bool, collections.deque[asyncio.Future[None]]] = {
            True: collections.deque(),
            False: collections.deque(),
        }

    async def take(self, first: bool) -> None:
        if not self.busy:
            self.busy = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[first].append(turn)
        try:
            async with asyncio.timeout(WAIT):
                await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.end()  # handed the turn just as this waiter gave up: pass it on
            else:
                turn.cancel()
            raise

    def end(self) -> None:
        for kind in (True, False):
            queue = self.waiting[kind]
            while queue:
                turn = queue.popleft()
                if not turn.done():
                    turn.set_result(None)  # the turn passes on: still busy
                    return
        self.busy = False


# per event loop, per engine: both weakly, so neither outlives its use (nor an engine's
# turns pass to another that reuses its id)
_turns: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakKeyDictionary[Engine, _Turns]
] = weakref.WeakKeyDictionary()


async def take_turn(engine: AsyncEngine, *, first: bool = False) -> Callable[[], None]:
    """Wait for this process's turn to write to ``engine``'s SQLite file (at once for
    another database) and return what ends it; ``WriterBusy`` past ``WAIT``. ``first``:
    an acknowledgement waits for this write, so it goes before the other waiting ones."""
    if engine.dialect.name != "sqlite":
        return _nothing
    loop = asyncio.get_running_loop()
    turns = _turns.setdefault(loop, weakref.WeakKeyDictionary()).setdefault(
        engine.sync_engine, _Turns()
    )
    try:
        await turns.take(first)
    except TimeoutError:
        raise WriterBusy("database is locked") from None
    return turns.end


def _nothing() -> None:
    pass
