"""The delivery ledger lets each platform delivery through once, also under concurrency."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from services.ledger import DeliveryLedger
from tests.integration.support import Shop


async def test_first_delivery_wins_and_repeats_are_refused(shop: Shop) -> None:
    ledger = DeliveryLedger(engine=shop.engine, clock=shop.clock)
    assert await ledger.first_time("slack:command:1.abc")
    assert not await ledger.first_time("slack:command:1.abc")
    assert await ledger.first_time("slack:command:2.abc")


async def test_simultaneous_deliveries_yield_one_winner(shop: Shop) -> None:
    ledger = DeliveryLedger(engine=shop.engine, clock=shop.clock)
    results = await asyncio.gather(
        *(ledger.first_time("slack:action:9:U0BOB:cr:approve:1") for _ in range(8))
    )
    assert sorted(results) == [False] * 7 + [True]


async def test_old_keys_are_forgotten(shop: Shop) -> None:
    ledger = DeliveryLedger(engine=shop.engine, clock=shop.clock)
    await ledger.first_time("old")
    shop.clock.advance(days=3)
    await ledger.first_time("new")
    await ledger.forget_older_than(timedelta(days=2))
    assert await ledger.first_time("old")
    assert not await ledger.first_time("new")
