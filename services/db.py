"""Async engines for queuebot's own state and for the queue estate.

PostgreSQL through psycopg 3, SQLite through aiosqlite. Plain ``postgresql://`` and
``sqlite:///`` URLs are given their async driver so a user can paste the URL they have.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from services.errors import ConfigError
from services.estate.signature import error_signature
from services.jsonable import dumps, loads

_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg2": "postgresql+psycopg",
    "postgresql+asyncpg": "postgresql+psycopg",
    "sqlite": "sqlite+aiosqlite",
}


def normalise_url(url: str) -> URL:
    """Parse a database URL and give it the async driver queuebot uses."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            "database URL is not valid; expected e.g. postgresql://user@host/db or "
            "sqlite:///./queuebot.db"
        ) from exc
    driver = _DRIVERS.get(parsed.drivername, parsed.drivername)
    if driver not in ("postgresql+psycopg", "sqlite+aiosqlite"):
        raise ConfigError(
            f"database driver {parsed.drivername!r} is not supported; use PostgreSQL "
            "(postgresql://...) or SQLite (sqlite:///path)"
        )
    return parsed.set(drivername=driver)


def redacted(url: str | URL) -> str:
    """The URL with its password hidden, safe for logs and messages."""
    parsed = url if isinstance(url, URL) else make_url(url)
    return parsed.render_as_string(hide_password=True)


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer; busy_timeout turns "database is locked"
    # into a short wait; the signature function mirrors the PostgreSQL regexp chain.
    dbapi_conn.create_function("qb_signature", 1, error_signature, deterministic=True)
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


def create_engine(url: str, *, pool_size: int = 5) -> AsyncEngine:
    parsed = normalise_url(url)
    if parsed.drivername.startswith("sqlite"):
        engine = create_async_engine(parsed, json_serializer=dumps, json_deserializer=loads)
        event.listen(engine.sync_engine, "connect", _sqlite_connect)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
        return engine
    return create_async_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        json_serializer=dumps,
        json_deserializer=loads,
    )
