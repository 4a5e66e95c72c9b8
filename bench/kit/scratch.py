"""A scratch PostgreSQL database for one benchmark run, named for that run alone.

The name is the bench's prefix, the process id and a random suffix
(``qb_bench_redrive_4242_9f3a1c``), so two runs at once, on one machine or two sharing a
server, never drop each other's database. Each run drops its own at the end. A run that
was killed outright (SIGKILL) leaves its database behind; ``leftovers`` lists them.

URLs: a bench takes an admin URL of the server (``--url``, any driver); ``conninfo`` is
a URL as libpq (psycopg, node) takes it, ``engine_url`` as queuebot's engine takes it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url


def conninfo(url: str, database: str | None = None) -> str:
    """``url`` (or its server's ``database``) as libpq takes it."""
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def engine_url(url: str, database: str | None = None) -> str:
    """``url`` (or its server's ``database``) as queuebot's engine takes it (psycopg 3)."""
    parsed = make_url(url).set(drivername="postgresql+psycopg")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def unique_name(prefix: str) -> str:
    """A database name no other run picks: ``prefix``, this process's id, 6 random hex."""
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"


def exists(url: str, name: str) -> bool:
    with psycopg.connect(conninfo(url), autocommit=True, connect_timeout=5) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        return found.fetchone() is not None


def create_named(url: str, name: str) -> str:
    """Create the database ``name`` beside ``url``; its engine URL."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return engine_url(url, name)


def create(url: str, prefix: str) -> tuple[str, str]:
    """Create a database of this run's own beside ``url``: (its name, its engine URL)."""
    name = unique_name(prefix)
    return name, create_named(url, name)


def drop(url: str, name: str) -> None:
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def scratch(url: str, prefix: str, *, say: bool = True) -> Iterator[tuple[str, str]]:
    """A database of this run's own for as long as the block runs: (name, engine URL).
    Dropped after, also on an error or an interruption; ``say``: print both."""
    name, db_url = create(url, prefix)
    if say:
        print(f"scratch database {name}")
    try:
        yield name, db_url
    finally:
        drop(url, name)
        if say:
            print(f"dropped {name}")


def leftovers(url: str, prefix: str) -> list[str]:
    """Databases of ``prefix`` that runs left behind (or that are running now)."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        found = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname",
            (prefix.replace("_", r"\_") + r"\_%",),
        )
        return [str(row[0]) for row in found]
