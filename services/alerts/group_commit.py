"""Rows that concurrent requests write, stored together: one INSERT and one commit for
every request that arrived while the previous commit ran (group commit).

The batch is one multi-row INSERT, not an INSERT per row. Each
request still waits for its own row's commit, so "stored before acknowledged"
holds. A batch the database is away for fails every request of it (each is answered 503
and sent again); a batch the database refused for any other reason (a value it cannot
keep) is written again row by row, so only the row it refuses fails and the others are
stored. Under load the database sees one transaction per batch instead of one per
request; alone, a request is written at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import transaction
from services.errors import DatabaseUnavailable

MOST = 500  # rows per INSERT


def _retrieve(future: asyncio.Future[None]) -> None:
    """A request that went away leaves its outcome unread; read it, so nothing warns."""
    if not future.cancelled():
        future.exception()


class GroupCommit:
    def __init__(self, engine: AsyncEngine, table: sa.Table, *, subject: str) -> None:
        self.engine = engine
        self.table = table
        self.subject = subject
        # With RETURNING, SQLAlchemy sends the rows as one multi-row VALUES statement
        # ("insertmanyvalues", compiled once); without it, psycopg's executemany costs a
        # statement per row.
        self._insert = table.insert().returning(*table.primary_key.columns)
        self._pending: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, row: dict[str, Any]) -> None:
        """Return once ``row`` is committed; raise what the commit raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.add_done_callback(_retrieve)
        self._pending.append((row, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        await asyncio.shield(done)

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MOST], self._pending[MOST:]
            await self._commit(batch)

    async def _commit(self, batch: list[tuple[dict[str, Any], asyncio.Future[None]]]) -> None:
        try:
            async with transaction(self.engine, subject=self.subject) as conn:
                await conn.execute(self._insert, [row for row, _ in batch])
        except Exception as exc:
            if len(batch) > 1 and not isinstance(exc, DatabaseUnavailable):
                for one in batch:  # which row was refused: it alone fails
                    await self._commit([one])
                return
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)
