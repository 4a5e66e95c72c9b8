"""Async engines for queuebot's own state and for the queue estate.

PostgreSQL through psycopg 3, SQLite through aiosqlite. Plain ``postgresql://`` and
``sqlite:///`` URLs are given their async driver so a user can paste the URL they have.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from services import privileges
from services.config import DatabaseConfig
from services.db import bounds as db_bounds
from services.db import on_commit, writers
from services.db.on_commit import FollowUp
from services.errors import (
    ConcurrentChange,
    ConfigError,
    DatabaseUnavailable,
    NotMigrated,
    Unavailable,
)
from services.jsonable import dumps, loads

_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg2": "postgresql+psycopg",
    "postgresql+asyncpg": "postgresql+psycopg",
    "sqlite": "sqlite+aiosqlite",
}


# Where a URL's port is, read as SQLAlchemy's make_url reads it (the user and password
# before an @ are skipped and never shown).
# Each URL as queuebot connects to it -> the URL as it was typed, so that messages show
# the latter (a handful of entries: the URLs of one process's configuration).
_AS_TYPED: dict[str, URL] = {}
_PORT = re.compile(
    r"^[\w+]+://(?:[^:/]*(?::[^@]*)?@)?(?:\[[^/?]+\]|[^/:?]+)?(?::(?P<port>[^/?]*))?"
)


def normalise_url(url: str, *, variable: str = "the database URL") -> URL:
    """Parse a database URL and give it the async driver queuebot uses. A URL that is
    none, or whose port is no port, is a ``ConfigError`` naming ``variable`` (where the
    URL came from) that never shows the password."""
    port = _PORT.match(url)
    said = port["port"] if port is not None else None
    if said is not None and not (said.isdigit() and 0 < int(said) < 65536):
        raise ConfigError(
            f"the port {said[:20]!r} in {variable} is not a number from 1 to 65535; write "
            "it as postgresql://user@host:5432/db, or leave it out for PostgreSQL's 5432"
        )
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(
            f"{variable} is not a valid database URL; expected e.g. postgresql://user@host/db "
            "or sqlite:///./queuebot.db"
        ) from exc
    driver = _DRIVERS.get(parsed.drivername, parsed.drivername)
    if driver not in ("postgresql+psycopg", "sqlite+aiosqlite"):
        raise ConfigError(
            f"{variable}: database driver {parsed.drivername!r} is not supported; use "
            "PostgreSQL (postgresql://...) or SQLite (sqlite:///path)"
        )
    normal = parsed.set(drivername=driver)
    _AS_TYPED[normal.render_as_string(hide_password=False)] = parsed
    return normal


def same_database(a: str, b: str) -> bool:
    """Whether two URLs name one database (as queuebot connects to it)."""
    return normalise_url(a) == normalise_url(b)


def redacted(url: str | URL) -> str:
    """The URL with its password hidden, safe for logs and messages; an engine's URL is
    shown as the person typed it (``postgresql://``, not the driver queuebot chose)."""
    parsed = url if isinstance(url, URL) else make_url(url)
    if isinstance(url, URL):
        parsed = _AS_TYPED.get(url.render_as_string(hide_password=False), parsed)
    return parsed.render_as_string(hide_password=True)


def process_owner() -> str:
    """This process's name in the rows it claims or leases (a delivery's claim in the
    ledger, an outbox item's lease): host, pid and a random part (a pid is reused)."""
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{secrets.token_hex(3)}"


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names; None for other databases, in-memory ones and URI
    filenames (``file:...``, which say themselves whether a file may be created)."""
    parsed = normalise_url(url)
    name = parsed.database
    if not parsed.drivername.startswith("sqlite") or not name or name == ":memory:":
        return None
    if name.startswith("file:"):
        return None
    return Path(name)


def check_url(url: str, *, variable: str) -> None:
    """Refuse a URL queuebot could not use, naming the variable it came from."""
    normalise_url(url, variable=variable)


def require_sqlite_file(
    url: str, *, variable: str, state: bool, must_exist: bool, default: bool = False
) -> None:
    """SQLite creates a missing file when it connects, and cannot when its directory is
    missing ("unable to open database file"). Say either in one line before connecting:
    a command that only reads must not leave an empty database behind. ``state`` says the
    file is queuebot's own database (``queuebot db upgrade`` makes it), not the queue's;
    ``default`` that ``variable`` is not set and the URL is queuebot's default."""
    path = sqlite_file(url)
    if path is None:
        return
    where = f"the default, as {variable} is not set" if default else variable
    if not path.parent.is_dir():
        raise Unavailable(
            f"the directory {path.parent.absolute()} of the SQLite database {path.name} "
            f"({where}) does not exist: create it, or point {variable} elsewhere"
        )
    if not must_exist or path.exists():
        return
    if state:
        raise NotMigrated(
            f"the SQLite database {path.absolute()} ({where}) does not exist: run "
            "`queuebot db upgrade` to create it (or `queuebot demo` to try queuebot), or "
            f"point {variable} at queuebot's database"
        )
    raise Unavailable(
        f"the SQLite database {path.absolute()} ({where}) does not exist: point {variable} "
        "at the file that holds your queue tables"
    )


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer; busy_timeout turns "database is locked"
    # into a short wait. SQL functions a domain needs are registered by that domain.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
    # Let SQLAlchemy, not the sqlite3 module, start transactions (see _sqlite_begin).
    dbapi_conn.isolation_level = None


READ_ONLY = {"qb_read_only": True}  # execution options of a connection that only reads


def _sqlite_begin(conn: Any) -> None:
    # BEGIN IMMEDIATE takes the write lock up front. A deferred transaction that reads
    # and then writes fails at once ("database is locked") when another writer committed
    # in between; an immediate one waits its turn (busy_timeout) and then sees fresh rows.
    # A connection marked READ_ONLY never writes: under WAL it reads beside the writer.
    read_only = conn.get_execution_options().get("qb_read_only", False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def error_line(exc: DBAPIError) -> str:
    """The first line of what the database driver said, for a person to read."""
    said = str(exc.orig).strip().splitlines() if exc.orig is not None else []
    return said[0] if said else type(exc.orig or exc).__name__


def unreachable(engine: AsyncEngine, exc: DBAPIError, *, doing: str = "reach") -> Unavailable:
    """queuebot's own database cannot be reached, in one line that names the fix."""
    return Unavailable(
        f"cannot {doing} queuebot's database {redacted(engine.url)} ({error_line(exc)}): "
        "check QUEUEBOT_DATABASE_URL and that the database is up"
    )


def create_engine(
    url: str, *, pool_size: int = 5, settings: DatabaseConfig | None = None
) -> AsyncEngine:
    """An engine for ``url``. On PostgreSQL every connection it opens carries the
    timeouts and keepalives of ``settings`` (``[database]``; its defaults when None) and
    closes itself when an answer takes too long (services/db/bounds.py)."""
    parsed = normalise_url(url)
    if parsed.drivername.startswith("sqlite"):
        engine = create_async_engine(parsed, json_serializer=dumps, json_deserializer=loads)
        event.listen(engine.sync_engine, "connect", _sqlite_connect)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
        return engine
    return create_async_engine(
        parsed,
        connect_args=db_bounds.connect_args(parsed, settings or DatabaseConfig()),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        json_serializer=dumps,
        json_deserializer=loads,
    )


def _unavailable(exc: BaseException) -> bool:
    """A failure of the database or the way to it, not of the statement."""
    if isinstance(exc, PoolTimeout | OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def _unique_violation(exc: DBAPIError) -> bool:
    """A unique rule refused the row: a concurrent twin of this change got there first;
    or PostgreSQL broke a deadlock with a concurrent transaction, or could not serialize
    this one beside it (nothing was done: the change may be tried again)."""
    if getattr(exc.orig, "sqlstate", None) in ("40P01", "40001"):  # deadlock, serialization
        return True
    if not isinstance(exc, IntegrityError):
        return False
    if getattr(exc.orig, "sqlstate", None) == "23505":  # PostgreSQL unique_violation
        return True
    return "UNIQUE constraint failed" in str(exc.orig)  # SQLite


@contextlib.asynccontextmanager
async def transaction(
    engine: AsyncEngine,
    *,
    subject: str,
    follow_ups: list[FollowUp] | None = None,
    first: bool = False,
) -> AsyncIterator[AsyncConnection]:
    """One transaction of a use case, with the database's failures translated where they
    happen: ``DatabaseUnavailable`` saying whether anything was committed, and
    ``ConcurrentChange`` when a unique rule caught a concurrent twin of this change.
    ``subject`` names what is being changed (``CR-12``, ``P-3``) for that message.

    What its steps register to follow the commit (``on_commit``) goes into
    ``follow_ups``, for the caller to run once the block is over; without that list the
    transaction runs it itself once it committed (``run_follow_ups``). Nothing of it runs
    when the transaction rolls back. ``first``: an acknowledgement waits for it (on SQLite
    it writes before the other transactions waiting their turn: ``writers.py``)."""
    where = redacted(engine.url)
    work: list[FollowUp] = follow_ups if follow_ups is not None else []
    end_turn = await _writer_turn(engine, where, first)  # SQLite: the process's writers in turn
    try:
        conn = await _connected(engine, where)
    except BaseException:
        end_turn()
        raise
    try:
        on_commit.attach(conn, work)
        trans = await conn.begin()
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                await trans.rollback()
            raise
        try:
            await trans.commit()
        except DBAPIError as exc:
            if _unique_violation(exc):
                raise ConcurrentChange(subject=subject) from exc
            raise DatabaseUnavailable(
                database=where, detail=error_line(exc), committed=None
            ) from exc
    except DBAPIError as exc:
        if _unique_violation(exc):
            raise ConcurrentChange(subject=subject) from exc
        missing = privileges.refused(
            sqlstate=getattr(exc.orig, "sqlstate", None),
            said=error_line(exc),
            statement=exc.statement,
            role=engine.url.username,
            subject=subject,
        )
        if missing is not None:
            raise missing from exc
        if not _unavailable(exc):
            raise
        raise DatabaseUnavailable(database=where, detail=error_line(exc), committed=False) from exc
    finally:
        try:
            with contextlib.suppress(Exception):
                on_commit.detach(conn)
            with contextlib.suppress(Exception):
                await conn.close()
        finally:  # even when a cancel lands in the close; before the follow-ups: they write
            end_turn()
    if follow_ups is None and work:
        await on_commit.run_follow_ups(work, what=subject)


async def _writer_turn(engine: AsyncEngine, where: str, first: bool) -> Callable[[], None]:
    try:
        return await writers.take_turn(engine, first=first)
    except writers.WriterBusy as exc:
        raise DatabaseUnavailable(database=where, detail=str(exc), committed=False) from exc


async def _connected(engine: AsyncEngine, where: str) -> AsyncConnection:
    try:
        return await engine.connect()
    except DBAPIError as exc:
        raise DatabaseUnavailable(database=where, detail=error_line(exc), committed=False) from exc
    except PoolTimeout as exc:
        raise DatabaseUnavailable(
            database=where, detail="no connection free", committed=False
        ) from exc


@contextlib.asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection that only reads queuebot's own tables; the database's failures
    become ``DatabaseUnavailable`` (nothing was changed: nothing was asked to change)."""
    where = redacted(engine.url)
    try:
        async with engine.connect() as conn:
            await conn.execution_options(**READ_ONLY)
            yield conn
    except PoolTimeout as exc:
        raise DatabaseUnavailable(
            database=where, detail="no connection free", committed=False
        ) from exc
    except DBAPIError as exc:
        if not _unavailable(exc):
            raise
        raise DatabaseUnavailable(database=where, detail=error_line(exc), committed=False) from exc


class Outage:
    """A background loop's memory of a database outage: it says once that the database
    is away and once that it is back, instead of a traceback every pass."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log = log
        self.what = what
        self.down = False

    def failed(self, exc: DatabaseUnavailable) -> None:
        if not self.down:
            self.log.warning(
                "%s paused: %s; it goes on by itself when it is back", self.what, exc.message
            )
            self.down = True

    def passed(self) -> None:
        if self.down:
            self.log.info("%s resumed: the database is back", self.what)
            self.down = False
