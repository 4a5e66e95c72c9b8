"""``queuebot db upgrade``: bring queuebot's own tables to the newest schema.

Safe when several replicas start at once: on PostgreSQL the upgrade runs under an
advisory lock, so one replica migrates and the others find the work done.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import redacted, unreachable
from services.db.bounds import unbounded
from services.errors import NotMigrated

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATION_LOCK = 0x71B0_0001  # pg_advisory_xact_lock key for migrations
# PostgreSQL's timeouts a migration turns off (SET LOCAL: for its transaction alone)
EXEMPT = (
    "statement_timeout = 0",
    "lock_timeout = 0",
    "idle_in_transaction_session_timeout = 0",
)
VERSION_TABLE = "alembic_version"
INSUFFICIENT_PRIVILEGE = "42501"  # PostgreSQL's SQLSTATE for "permission denied"
_MIGRATION_FILE = re.compile(r"(\d{4})_\w+\.py")


def _alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("services") / "migrations"))
    return cfg


def _upgrade(connection: Connection, revision: str) -> None:
    from alembic import command

    if connection.dialect.name == "postgresql":
        # A migration may rewrite a large table, and a replica starting beside the one
        # migrating waits for its lock: neither is cut by [database]'s timeouts.
        for setting in EXEMPT:
            connection.execute(text(f"SET LOCAL {setting}"))
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
    cfg = _alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def _current(connection: Connection) -> str | None:
    """The revision stamped in the database (None: queuebot's tables are not there), read
    with one query, as alembic keeps it: one row in ``alembic_version``."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    stamped = connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
    return ", ".join(sorted(stamped)) or None


def head_revision() -> str:
    """The newest revision, from the migration files' names: each is ``NNNN_what.py`` and
    declares revision ``"NNNN"`` after ``"NNNN-1"`` (tests/unit/test_migration_files.py
    holds every file to that). Read without importing alembic, which serve and its worker
    would otherwise load at every start only to find nothing to do."""
    folder = resources.files("services") / "migrations" / "versions"
    return max(m[1] for f in folder.iterdir() if (m := _MIGRATION_FILE.fullmatch(f.name)))


def _unknown(engine: AsyncEngine, revision: str) -> NotMigrated:
    return NotMigrated(
        f"queuebot's database {redacted(engine.url)} is at revision {revision}, which this "
        f"queuebot does not know (its newest is {head_revision()}): a newer queuebot migrated "
        "it; run that version"
    )


async def upgrade(engine: AsyncEngine, revision: str = "head") -> str | None:
    """Migrate to ``revision`` (the newest by default); return the revision now in place.
    Tables already at the newest revision cost one read: no lock, no alembic."""
    try:
        if revision == "head":
            async with engine.connect() as conn:
                current = await conn.run_sync(_current)
            if current == head_revision():
                return current
        from alembic.util import CommandError

        try:
            with unbounded():  # nor by queuebot's own bound on a wait for an answer
                async with engine.begin() as conn:
                    await conn.run_sync(_upgrade, revision)
        except ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
                raise
            raise await _not_theirs(engine, exc) from exc
        except CommandError as exc:  # the database is at a revision these migrations lack
            current = await current_revision(engine)
            if current is None or _known(current):
                raise
            raise _unknown(engine, current) from exc
        async with engine.connect() as conn:
            return await conn.run_sync(_current)
    except OperationalError as exc:
        raise unreachable(engine, exc, doing="migrate") from exc


async def _not_theirs(engine: AsyncEngine, exc: ProgrammingError) -> NotMigrated:
    """The role connected may not migrate (the least-privileged runtime role: serve started
    before the owner ran the migration). Nothing was changed: the upgrade's transaction
    rolled back."""
    current = await current_revision(engine)
    reason = (str(exc.orig).strip().splitlines() or ["permission denied"])[0]
    where = "are not there yet" if current is None else f"are at revision {current}"
    return NotMigrated(
        f"queuebot's tables in {redacted(engine.url)} {where} (newest {head_revision()}) and "
        f"role {engine.url.username!r} may not migrate them ({reason}): "
        "run `queuebot db upgrade` as their owner first"
    )


def _known(revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(_alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


async def current_revision(engine: AsyncEngine) -> str | None:
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_current)
    except OperationalError as exc:
        raise unreachable(engine, exc) from exc


async def require_newest(engine: AsyncEngine) -> None:
    """Refuse to read queuebot's tables unless they are at the newest revision, naming the
    fix: ``queuebot db upgrade`` for missing or older tables."""
    current, newest = await current_revision(engine), head_revision()
    if current == newest:
        return
    if current is None:
        raise NotMigrated(
            f"queuebot's tables are not in {redacted(engine.url)} yet: run "
            "`queuebot db upgrade` first"
        )
    if not _known(current):
        raise _unknown(engine, current)
    raise NotMigrated(
        f"queuebot's database {redacted(engine.url)} is at revision {current}, newest is "
        f"{newest}: run `queuebot db upgrade` first"
    )
