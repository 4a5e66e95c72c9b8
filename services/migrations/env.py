"""Alembic environment for queuebot's own tables.

``services.db.migrate.upgrade`` hands in a live connection (``config.attributes``); the
plain ``alembic`` CLI path builds an async engine from ``sqlalchemy.url``.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from services.db import create_engine
from services.db.bounds import unbounded
from services.db.migrate import EXEMPT
from services.db.tables import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    with unbounded():  # a migration may run for minutes (services/db/migrate.py)
        async with engine.connect() as conn:
            if conn.dialect.name == "postgresql":  # for this session, before alembic's own
                for setting in EXEMPT:
                    await conn.execute(text(f"SET {setting}"))
                await conn.commit()
            await conn.run_sync(_run)
    await engine.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_async(config.get_main_option("sqlalchemy.url") or ""))
