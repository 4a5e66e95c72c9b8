"""How long a PostgreSQL connection of queuebot's may wait for an answer (``[database]``).

Three layers, because each sees a different silence:

- PostgreSQL's own ``statement_timeout``, ``lock_timeout`` and
  ``idle_in_transaction_session_timeout`` stop work that runs too long on a live server,
  and its TCP keepalives end the sessions of a client it can no longer reach (freeing
  the locks they held). Each connection sets them once, right after it is made, with one
  statement (``set_config``): not in the startup packet's ``options``, which PgBouncer
  refuses unless configured for them.
- libpq's ``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` see a network path
  that stopped carrying packets: an idle connection is found dead within
  ``keepalives_idle + keepalives_interval * keepalives_count``, one waiting on unacknowledged
  data within ``tcp_user_timeout``.
- Neither sees a peer that keeps TCP alive and answers nothing (a proxy or pooler whose
  database is gone, or a server too stuck to cancel): queuebot's connections close
  themselves when an answer takes longer than ``answer_within`` (the statement timeout
  plus two seconds), by shutting their socket down, so the wait ends with the driver's
  own "connection lost" error and the pool discards the connection.

``bounded(seconds)`` gives the waits of a block (in one task) a shorter bound (readiness:
a probe must answer in time), ``unbounded()`` none at all (migrations, which may run for
minutes); both take effect on the connections used inside the block.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import psycopg
from sqlalchemy.engine import URL, Dialect

from services.config import DatabaseConfig

_UNBOUNDED = -1.0
# seconds for the waits of this task's block: unset (each connection's own), a number, or
# _UNBOUNDED
_BOUND: ContextVar[float | None] = ContextVar("queuebot_db_bound", default=None)


def libpq_params(url: URL, settings: DatabaseConfig) -> dict[str, Any]:
    """libpq's connection parameters for a PostgreSQL URL with ``settings``' timeouts and
    keepalives; what the URL itself says wins."""
    # as SQLAlchemy's own psycopg dialect reads the URL (its query, several hosts)
    _, given = _dialect(url).create_connect_args(url)
    ours: dict[str, Any] = {
        "connect_timeout": settings.connect_timeout_seconds,
        "keepalives": 1,
        "keepalives_idle": settings.keepalives_idle_seconds,
        "keepalives_interval": settings.keepalives_interval_seconds,
        "keepalives_count": settings.keepalives_count,
        "tcp_user_timeout": settings.tcp_user_timeout_seconds * 1000,
    }
    return {**ours, **given}


def server_settings(url: URL, settings: DatabaseConfig) -> tuple[str, list[str]]:
    """The statement that sets PostgreSQL's side of ``settings`` for a session, and its
    parameters; a setting the URL's ``options`` give (``-c name=value``) is left as the
    URL has it. Values are milliseconds (seconds for the keepalives), as PostgreSQL reads
    a number without a unit."""
    _, given = _dialect(url).create_connect_args(url)
    named = {n.replace("-", "_") for n in _OPTION.findall(str(given.get("options") or ""))}
    wanted = {
        "statement_timeout": _ms(settings.statement_timeout_seconds),
        "lock_timeout": _ms(settings.lock_timeout_seconds),
        "idle_in_transaction_session_timeout": _ms(settings.idle_in_transaction_timeout_seconds),
        # PostgreSQL's side of the same keepalives: it ends the session of a client it lost
        "tcp_keepalives_idle": settings.keepalives_idle_seconds,
        "tcp_keepalives_interval": settings.keepalives_interval_seconds,
        "tcp_keepalives_count": settings.keepalives_count,
        "tcp_user_timeout": settings.tcp_user_timeout_seconds * 1000,
    }
    chosen = [(name, str(value)) for name, value in wanted.items() if name not in named]
    if not chosen:
        return "", []
    calls = ", ".join("set_config(%s, %s, false)" for _ in chosen)
    return f"SELECT {calls}", [part for pair in chosen for part in pair]


_OPTION = re.compile(r"(?:-c\s*|--)([A-Za-z_][A-Za-z0-9_.-]*)\s*=")


def _dialect(url: URL) -> Dialect:
    return url.set(drivername="postgresql+psycopg").get_dialect(_is_async=True)()


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Within the block (this task), every wait for the database ends after ``seconds``."""
    token = _BOUND.set(seconds)
    try:
        yield
    finally:
        _BOUND.reset(token)


@contextlib.contextmanager
def unbounded() -> Iterator[None]:
    """Within the block (this task), waits for the database are not cut by queuebot: for
    work that may take minutes on a live database (migrations)."""
    token = _BOUND.set(_UNBOUNDED)
    try:
        yield
    finally:
        _BOUND.reset(token)


def bound_now(default: float | None) -> float | None:
    """The bound of a wait starting now: the block's, else ``default``; None: none."""
    chosen = _BOUND.get()
    if chosen is None:
        return default
    return None if chosen == _UNBOUNDED else chosen


def shut(fd: int) -> None:
    """Shut the socket ``fd`` down for both directions, leaving the descriptor open for
    its owner to close: a wait on it ends at once, as if the server had gone."""
    with contextlib.suppress(OSError):
        dup = socket.socket(fileno=os.dup(fd))
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()


class NoAnswer(psycopg.OperationalError):
    """The database did not answer within the bound; queuebot closed the connection."""


class BoundedAsyncConnection(psycopg.AsyncConnection[Any]):
    """A psycopg connection that gives up on a wait after ``answer_within`` seconds (or
    the block's bound): its socket is shut down, the wait ends in ``NoAnswer``, and the
    connection is broken, so SQLAlchemy's pool discards it."""

    answer_within: float | None = None

    async def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        bound = bound_now(self.answer_within)
        if bound is None:
            return await super().wait(gen, *args, **kwargs)
        try:
            fd = self.pgconn.socket
        except psycopg.OperationalError:
            return await super().wait(gen, *args, **kwargs)  # says the connection is lost
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            shut(fd)

        timer = asyncio.get_running_loop().call_later(bound, expire)
        try:
            return await super().wait(gen, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if expired:
                raise NoAnswer(f"no answer from the database within {bound:g} s") from exc
            raise
        finally:
            timer.cancel()


class _Cursor(psycopg.AsyncCursor[Any]):
    """SQLAlchemy's pool pings a connection before lending it (``pool_pre_ping``) with the
    empty statement: a live database answers it at once, so it is given no longer than a
    new connection would be, not a statement's bound. A silent database then costs a
    checkout one ping and one connection attempt."""

    ping_within: float | None = None

    async def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query != PING or self.ping_within is None or _BOUND.get() is not None:
            return await super().execute(query, *args, **kwargs)
        with bounded(self.ping_within):
            return await super().execute(query, *args, **kwargs)


PING = ";"  # SQLAlchemy's pre-ping statement on psycopg (its dialect's "select one")


def connect_args(url: URL, settings: DatabaseConfig) -> dict[str, Any]:
    """What SQLAlchemy's async engine for ``url`` adds to the connection parameters it
    reads from the URL (and to its own: the JSON adapters queuebot's serializers need):
    ``settings``' timeouts and keepalives where the URL sets none, and the connection
    class that bounds its own waits and sets PostgreSQL's side once made. A block's
    shorter bound (``bounded``) shortens the connection attempt too (libpq's floor is
    2 s)."""
    params = libpq_params(url, settings)
    _, given = _dialect(url).create_connect_args(url)
    added = {k: v for k, v in params.items() if k not in given}
    statement, values = server_settings(url, settings)
    ping = float(min(settings.connect_timeout_seconds, settings.answer_within))

    class Cursor(_Cursor):
        ping_within = ping

    async def connect(**kwargs: Any) -> BoundedAsyncConnection:
        timeout = kwargs.get("connect_timeout", settings.connect_timeout_seconds)
        block = bound_now(None)
        if block is not None:
            timeout = max(2, min(int(timeout), math.ceil(block)))
        conn = await BoundedAsyncConnection.connect(
            **{**kwargs, "connect_timeout": timeout}, cursor_factory=Cursor
        )
        conn.answer_within = settings.answer_within
        try:
            if statement:  # in autocommit: one round trip, and no transaction left open
                await conn.set_autocommit(True)
                await conn.execute(statement, values)
                await conn.set_autocommit(False)
        except BaseException:
            await conn.close()
            raise
        return conn

    # SQLAlchemy's psycopg adaptation opens each connection with this, given every
    # parameter it would give psycopg's own (how its public ``async_creator`` works)
    return {**added, "async_creator_fn": connect}
