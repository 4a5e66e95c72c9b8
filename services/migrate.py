"""``queuebot db upgrade``: bring queuebot's own tables to the newest schema.

Safe when several replicas start at once: on PostgreSQL the upgrade runs under an
advisory lock, so one replica migrates and the others find the work done.
"""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import redacted, unreachable
from services.errors import NotMigrated

MIGRATION_LOCK = 0x71B0_0001  # pg_advisory_xact_lock key for migrations


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("services") / "migrations"))
    return cfg


def _upgrade(connection: Connection, revision: str) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
    cfg = _alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def _unknown(engine: AsyncEngine, revision: str) -> NotMigrated:
    return NotMigrated(
        f"queuebot's database {redacted(engine.url)} is at revision {revision}, which this "
        f"queuebot does not know (its newest is {head_revision()}): a newer queuebot migrated "
        "it; run that version"
    )


async def upgrade(engine: AsyncEngine, revision: str = "head") -> str | None:
    """Migrate to ``revision`` (the newest by default); return the revision now in place."""
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade, revision)
        async with engine.connect() as conn:
            return await conn.run_sync(_current)
    except OperationalError as exc:
        raise unreachable(engine, exc, doing="migrate") from exc
    except CommandError as exc:  # the database is at a revision these migrations lack
        current = await current_revision(engine)
        if current is None or _known(current):
            raise
        raise _unknown(engine, current) from exc


def _known(revision: str) -> bool:
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
