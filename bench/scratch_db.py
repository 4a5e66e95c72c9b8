"""A scratch PostgreSQL database for one benchmark run, named for that run alone.

The name is the script's prefix, the process id and a random suffix
(``qb_bench_redrive_4242_9f3a1c``), so two runs at once, on one machine or two sharing a
server, never drop each other's database. Each run drops its own at the end. A run that
was killed outright (SIGKILL) leaves its database behind; ``leftovers`` lists them.
"""

from __future__ import annotations

import os
import secrets

import psycopg
from sqlalchemy.engine import make_url


def _admin(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def unique_name(prefix: str) -> str:
    """A database name no other run picks: ``prefix``, this process's id, 6 random hex."""
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"


def create(url: str, prefix: str) -> tuple[str, str]:
    """Create a database of this run's own beside ``url``: (its name, its async URL)."""
    name = unique_name(prefix)
    with psycopg.connect(_admin(url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    scratch = (
        make_url(url)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )
    return name, scratch


def drop(url: str, name: str) -> None:
    with psycopg.connect(_admin(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def leftovers(url: str, prefix: str) -> list[str]:
    """Databases of ``prefix`` that runs left behind (or that are running now)."""
    with psycopg.connect(_admin(url), autocommit=True) as conn:
        found = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname",
            (prefix.replace("_", r"\_") + r"\_%",),
        )
        return [str(row[0]) for row in found]
