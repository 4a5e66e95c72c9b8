"""Reading a test database from outside the process that uses it (a serve the test
started), on SQLite or PostgreSQL alike."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from services.db import create_engine


def query(db_url: str, statement: str, **params: Any) -> list[Any]:
    """The rows of one SQL statement on the database at ``db_url``, on an engine of its
    own (disposed after)."""

    async def run() -> list[Any]:
        engine = create_engine(db_url)
        try:
            async with engine.connect() as conn:
                return list((await conn.execute(sa.text(statement), params)).all())
        finally:
            await engine.dispose()

    return asyncio.run(run())
