"""The delivery ledger: act on each platform delivery once.

Slack retries a request it did not see acknowledged (``X-Slack-Retry-Num``), delivers
events at least once, and a nervous person double-clicks. Each delivery has a key made of
what the platform sends (trigger_id; action_ts + user + action; event_id); the first
``INSERT`` of a key wins and every later one is a duplicate. Several replicas share it.
Each method is its own transaction; a database failure comes out as DatabaseUnavailable.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.db import transaction
from services.models import Delivery

_deliveries = cast(sa.Table, Delivery.__table__)
KEEP = timedelta(days=2)  # far beyond any platform's retry window


class DeliveryLedger:
    def __init__(self, *, engine: AsyncEngine, clock: Callable[[], datetime]) -> None:
        self.engine = engine
        self.clock = clock

    async def first_time(self, key: str) -> bool:
        """Record ``key``; True only for the first delivery that records it."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            return await self._record(conn, key, self.clock())

    async def _record(self, conn: AsyncConnection, key: str, at: datetime) -> bool:
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        statement = (
            insert(_deliveries)
            .values(key=key[:200], seen_at=at)
            .on_conflict_do_nothing()
            .returning(_deliveries.c.key)
        )
        # RETURNING, not rowcount: psycopg reports -1 for INSERT ... ON CONFLICT
        return (await conn.execute(statement)).first() is not None

    async def claim(self, key: str, *, stale_after: timedelta) -> datetime | None:
        """Like ``first_time``, for work that must be done once but can fail half-way: a
        claim older than ``stale_after`` (its holder died before finishing) is taken over
        by exactly one later caller. Returns the claim's token (its time, which a takeover
        changes), or None when someone else holds the claim. Staleness is judged by the
        caller's clock: replicas' clocks must agree to well within ``stale_after``."""
        now = self.clock()
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            if await self._record(conn, key, now):
                return now
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            taken = await conn.execute(
                _deliveries.update()
                .where(_deliveries.c.key == key[:200], _deliveries.c.seen_at < now - stale_after)
                .values(seen_at=now)
                .returning(_deliveries.c.key)
            )
            return now if taken.first() is not None else None

    async def release(self, key: str, token: datetime) -> None:
        """Give a claim back so that the next caller may try the work again; only the
        claim ``token`` names (one taken over since then is someone else's)."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            await conn.execute(
                _deliveries.delete().where(
                    _deliveries.c.key == key[:200], _deliveries.c.seen_at == token
                )
            )

    async def forget_older_than(self, age: timedelta = KEEP) -> int:
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            result = await conn.execute(
                _deliveries.delete().where(_deliveries.c.seen_at < self.clock() - age)
            )
        return int(result.rowcount)
