"""Work that follows a commit: the chat posts a transaction's steps made, run once it
committed (never when it rolled back).

A step registers its work on the transaction it runs in (``on_commit(conn, callback)``),
instead of handing it back up through every caller: ``services.db.transaction`` keeps a
list of it for each transaction, reachable from the connection (``conn.info``, the
connection's own dictionary, for as long as the transaction holds the connection).
Whoever opened the transaction runs the list once it committed: the transaction itself
(``run_follow_ups``), or the use case or scheduler that handed it a list to fill, which
runs it with its own failure handling (a person's answer waits for it briefly,
``services.after_commit``).

Every follow-up is a kick of what is already stored (outbox items, a relay woken): a
connection no queuebot transaction opened (``engine.begin()``, a read) has no list, and
what a step registers there is left to the outbox relay's next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import DatabaseUnavailable

FollowUp = Callable[[], Awaitable[None]]
_WORK = "qb_on_commit"  # the key of a transaction's follow-ups in its connection's info
_log = logging.getLogger("queuebot.after_commit")


class PostsDeferred(Exception):
    """Chat posts of a committed change did not go out yet; they stay in the outbox and
    are retried until they do."""


@dataclass(frozen=True)
class PostFailure:
    """A follow-up (a chat post) that failed after its change was committed."""

    what: str
    error: str


def on_commit(conn: AsyncConnection, callback: FollowUp) -> None:
    """Run ``callback`` once ``conn``'s transaction commits (see the module's text)."""
    work = conn.info.get(_WORK)
    if work is not None:
        work.append(callback)


def attach(conn: AsyncConnection, work: list[FollowUp]) -> None:
    """``conn``'s transaction keeps what its steps register in ``work``."""
    conn.info[_WORK] = work


def detach(conn: AsyncConnection) -> None:
    """The transaction is over: the connection goes back to the pool without its list.

    An invalidated connection (its database went away mid-transaction) is left alone:
    the list went with the dead connection (its pool record's ``info`` is cleared when it
    connects again), and reading ``info`` would check a new connection out of the pool
    outside the event loop's reach (SQLAlchemy's pool then logs a traceback trying to
    close the dead one)."""
    if conn.invalidated or conn.closed:
        return
    conn.info.pop(_WORK, None)


async def run_follow_ups(
    follow_ups: Sequence[FollowUp], *, what: str, log: logging.Logger = _log
) -> tuple[PostFailure, ...]:
    """Run the work that follows a commit (chat posts). A failure never undoes the
    committed change: it is logged (on ``log``) and returned, so the person can be told."""
    failures: list[PostFailure] = []
    for follow_up in follow_ups:
        try:
            await follow_up()
        except (PostsDeferred, DatabaseUnavailable) as exc:  # kept; one line, no traceback
            log.warning("chat posts after the %s are deferred: %s", what, exc)
            failures.append(PostFailure(what, str(exc)[:300]))
        except Exception as exc:  # a chat post failing must not undo committed work
            log.exception("a chat post after the %s failed", what)
            failures.append(PostFailure(what, f"{type(exc).__name__}: {exc}"[:300]))
    return tuple(failures)
