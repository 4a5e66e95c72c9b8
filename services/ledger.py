"""The delivery ledger: act on each platform delivery once, and lose none.

Slack retries a request it did not see acknowledged (``X-Slack-Retry-Num``), Socket Mode
redelivers an envelope it did not see acknowledged, and a nervous person double-clicks.
Each delivery has a key made of what the platform sends (trigger_id; action_ts + user +
action; event_id). A key is first *claimed* by the process that works on it, then marked
*done*:

- a change marks its key done in the same transaction as the change
  (``complete_in``), so the change and "acted on" commit together or not at all;
- a read, or a command that failed, marks it done once its answer is out (``finish``);
  repeating a read after a crash is harmless.

A claim's owner refreshes it while it works (``heartbeat``). A claim nobody refreshed
for ``stale_after`` (its owner died) is taken over by exactly one later caller, and if
the old owner was only slow, its change finds the claim no longer its own and rolls back.
So a redelivery after a crash acts exactly once. Several replicas share the ledger.

Methods without a connection are their own transaction; ``complete_in`` runs in the
caller's. The same claims serve work that must be done once but can fail half-way (a
plan's message: ``release`` gives the claim back so the next caller tries again).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.db import transaction
from services.errors import ConcurrentChange, DatabaseUnavailable
from services.models import Delivery

_deliveries = cast(sa.Table, Delivery.__table__)
KEEP = timedelta(days=2)  # far beyond any platform's retry window
# A delivery's claim unrefreshed this long: its owner is gone. QUEUEBOT_CLAIM_STALE_SECONDS
# sets it per process (down to 5 s: the tests that kill processes wait it out).
STALE = timedelta(seconds=10)
HEARTBEAT = 2.0  # seconds between refreshes of a claim in progress
CLAIMED, DONE = "claimed", "done"
KEY_LENGTH = 200


def process_owner() -> str:
    """This process's name in claims: host, pid and a random part (a pid is reused)."""
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Claim:
    """A key held by one claim: ``owner`` names the process and this claim (two claims of
    one process are two owners), ``token`` is when it was claimed."""

    key: str
    owner: str
    token: datetime


class DeliveryLedger:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        owner: str | None = None,
        stale_after: timedelta = STALE,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.owner = owner or process_owner()
        self.stale_after = stale_after

    async def claim(self, key: str, *, stale_after: timedelta | None = None) -> Claim | None:
        """Claim ``key`` for this process. None when it is done already, or another owner
        holds a claim it refreshed within ``stale_after`` (default: the ledger's); a
        staler claim is taken over by exactly one caller. Staleness is judged by the
        caller's clock: replicas' clocks must agree to well within ``stale_after``."""
        key = key[:KEY_LENGTH]
        stale_after = self.stale_after if stale_after is None else stale_after
        now = self.clock()
        owner = f"{self.owner}/{secrets.token_hex(4)}"[:64]
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
            inserted = await conn.execute(
                insert(_deliveries)
                .values(key=key, seen_at=now, state=CLAIMED, owner=owner)
                .on_conflict_do_nothing()
                .returning(_deliveries.c.key)  # not rowcount: psycopg says -1 here
            )
            if inserted.first() is not None:
                return Claim(key, owner, now)
            taken = await conn.execute(
                _deliveries.update()
                .where(
                    _deliveries.c.key == key,
                    _deliveries.c.state == CLAIMED,
                    _deliveries.c.seen_at < now - stale_after,
                )
                .values(seen_at=now, owner=owner)
                .returning(_deliveries.c.key)
            )
            return Claim(key, owner, now) if taken.first() is not None else None

    async def heartbeat(self, claim: Claim) -> bool:
        """Refresh a claim in progress; False when it is no longer this owner's."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            refreshed = await conn.execute(
                _deliveries.update()
                .where(*_held(claim))
                .values(seen_at=self.clock())
                .returning(_deliveries.c.key)
            )
            return refreshed.first() is not None

    @asynccontextmanager
    async def kept_fresh(self, claim: Claim, *, every: float = HEARTBEAT) -> AsyncIterator[None]:
        """Refresh ``claim`` every ``every`` seconds while the block runs (a post that
        waits out a 429), so only a dead holder's claim goes stale."""

        async def beat() -> None:
            while True:
                await asyncio.sleep(every)
                with contextlib.suppress(DatabaseUnavailable):  # the next beat tries again
                    if not await self.heartbeat(claim):
                        return  # taken over: no longer ours to refresh

        beating = asyncio.create_task(beat())
        try:
            yield
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    async def finish(self, claim: Claim) -> None:
        """Mark the key done (after a read's answer, or a refusal), unless a change
        already did, or someone took the claim over."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            await conn.execute(
                _deliveries.update().where(*_held(claim)).values(state=DONE, done_at=self.clock())
            )

    async def release(self, claim: Claim) -> None:
        """Give a claim back so that the next caller may try the work again; only this
        claim (one taken over since then is someone else's)."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            await conn.execute(
                _deliveries.delete().where(
                    _deliveries.c.key == claim.key,
                    _deliveries.c.owner == claim.owner,
                    _deliveries.c.state == CLAIMED,
                )
            )

    async def forget_older_than(self, age: timedelta = KEEP) -> int:
        """Drop keys older than any platform redelivers (claims long abandoned too)."""
        async with transaction(self.engine, subject="the delivery ledger") as conn:
            return await forget(conn, before=self.clock() - age)


async def complete_in(conn: AsyncConnection, claim: Claim, *, now: datetime) -> None:
    """Inside a change's transaction: the delivery that asked for it is done, together
    with the change. When the claim is no longer this owner's (taken over by another
    process while this one was stalled) the change must not happen: ``ConcurrentChange``
    rolls it back, and the new owner acts instead."""
    done = await conn.execute(
        _deliveries.update()
        .where(*_held(claim))
        .values(state=DONE, done_at=now)
        .returning(_deliveries.c.key)
    )
    if done.first() is None:
        raise ConcurrentChange(subject="this delivery")


async def forget(conn: AsyncConnection, *, before: datetime) -> int:
    result = await conn.execute(_deliveries.delete().where(_deliveries.c.seen_at < before))
    return int(result.rowcount)


def _held(claim: Claim) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        _deliveries.c.key == claim.key,
        _deliveries.c.owner == claim.owner,
        _deliveries.c.state == CLAIMED,
    )
