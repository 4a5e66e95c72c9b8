"""Chat posts a change makes cannot vanish: they are written with the change and
delivered by the outbox, retried until they go out, in order, once per relay pass."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from services import outbox
from services.message import Message
from services.notify import ChannelRef, MessageRef
from services.outbox import LEASE, Outbox
from services.scheduler import Scheduler
from tests.integration.support import (
    RecordingNotifier,
    Shop,
    add_dead_letters,
    build_services,
    simulated_worker,
)
from tests.integration.test_plans import BOB, ERROR, flat_history, request_plan, tick


class FlakyChat(RecordingNotifier):
    """Refuses the first ``down`` posts (a Slack outage), then takes everything."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        if self.down > 0:
            self.down -= 1
            raise ConnectionError("slack is down")
        return await super().post(channel=channel, message=message, thread=thread)


async def undone(shop: Shop) -> int:
    async with shop.engine.connect() as conn:
        return int(
            (
                await conn.execute(sa.text("SELECT count(*) FROM qb_outbox WHERE done_at IS NULL"))
            ).scalar_one()
        )


async def test_posts_of_a_commit_whose_process_died_before_posting_go_out_later(
    shop: Shop,
) -> None:
    await add_dead_letters(shop.engine, count=30, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    await shop.changes.approve(number=number, actor=BOB)
    await shop.services.outbox.run_due()
    before = len(shop.notifier.posts)

    # A tick commits its wave and dies before its follow-ups run: nothing is posted yet ...
    await simulated_worker(shop.engine, now=shop.clock.now)  # the sample succeeds
    shop.clock.advance(seconds=5)
    sched: Scheduler = shop.services.scheduler
    async with shop.engine.begin() as conn:
        row = (
            await conn.execute(
                sa.text("SELECT id, subject FROM qb_schedule WHERE kind = 'plan.tick'")
            )
        ).one()
        await conn.execute(sa.text("DELETE FROM qb_schedule WHERE id = :i"), {"i": row[0]})
        await sched.handlers["plan.tick"](conn, str(row[1]), shop.clock.now)
    assert len(shop.notifier.posts) == before
    assert await undone(shop) >= 1

    # ... and the next process's relay delivers it.
    await shop.services.outbox.run_due()
    assert await undone(shop) == 0
    news = shop.notifier.texts()[before:]
    assert any("wave 1 started" in n for n in news), news


async def test_a_failed_post_is_retried_until_it_goes_out_in_order(shop: Shop) -> None:
    chat = FlakyChat(down=3)
    services = build_services(shop.engine, shop.estate, shop.clock, chat)
    await add_dead_letters(shop.engine, count=30, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    decision = await services.changes.approve(number=number, actor=BOB)
    assert decision.executed
    assert decision.post_failures and "slack is down" in decision.post_failures[0].error
    assert chat.posts == []

    for _ in range(10):  # the relay's passes, each after the backoff
        shop.clock.advance(minutes=5)
        await services.outbox.run_due()
    assert await undone(shop) == 0
    texts = chat.texts()
    assert texts[0].startswith("P-1:")  # the plan's own message first
    assert "sample started" in texts[1]  # then its thread, in order


async def test_concurrent_relays_deliver_each_post_once(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=60, error=ERROR)
    await flat_history(shop)
    async with shop.engine.begin() as conn:
        for n in range(20):
            await outbox.add(
                conn,
                kind="test.post",
                subject=f"s{n % 4}",
                payload={"n": n},
                now=shop.clock.now,
            )
    delivered: list[int] = []

    async def deliver(item: outbox.Item) -> None:
        await asyncio.sleep(0.01)
        delivered.append(int(item.payload["n"]))

    relays = [Outbox(engine=shop.engine, clock=shop.clock) for _ in range(3)]
    for relay in relays:
        relay.register("test.post", deliver)
    await asyncio.gather(*(relay.run_due() for relay in relays))
    assert sorted(delivered) == list(range(20))  # each once
    for subject in range(4):  # and per subject, in the order written
        mine = [n for n in delivered if n % 4 == subject]
        assert mine == sorted(mine)


async def test_a_relay_that_died_mid_delivery_leaves_the_post_to_come_due_again(
    shop: Shop,
) -> None:
    async with shop.engine.begin() as conn:
        await outbox.add(conn, kind="test.post", subject="x", payload={}, now=shop.clock.now)
    dying = Outbox(engine=shop.engine, clock=shop.clock)
    dying.register("test.post", lambda item: asyncio.sleep(0))
    claimed = await dying._claim("test.post", "x")  # claimed, then the process is killed
    assert claimed is not None
    seen: list[int] = []

    async def deliver(item: outbox.Item) -> None:
        seen.append(item.attempts)

    relay = Outbox(engine=shop.engine, clock=shop.clock)
    relay.register("test.post", deliver)
    assert await relay.run_due() == [] and seen == []  # leased to the dead one still
    shop.clock.advance(seconds=LEASE.total_seconds() + 1)
    assert await relay.run_due() == [] and seen == [2]
    shop.clock.advance(days=3)
    async with shop.engine.begin() as conn:
        await outbox.forget_done(conn, before=shop.clock.now - outbox.KEEP_DONE)
    assert await undone(shop) == 0


async def test_a_tick_posts_through_the_outbox(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=30, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    await shop.changes.approve(number=number, actor=BOB)
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)
    assert await undone(shop) == 0
    assert any("sample finished" in t for t in shop.notifier.texts())


async def test_a_kick_waits_for_the_relay_that_took_its_post_and_sends_the_rest(
    shop: Shop,
) -> None:
    async with shop.engine.begin() as conn:
        for n in range(3):
            await outbox.add(
                conn, kind="test.post", subject="x", payload={"n": n}, now=shop.clock.now
            )
    delivered: list[int] = []
    started = asyncio.Event()

    async def slow(item: outbox.Item) -> None:  # the relay a commit woke got there first
        started.set()
        await asyncio.sleep(0.3)
        delivered.append(int(item.payload["n"]))

    async def deliver(item: outbox.Item) -> None:
        delivered.append(int(item.payload["n"]))

    relay = Outbox(engine=shop.engine, clock=shop.clock)
    relay.register("test.post", slow)
    kicker = Outbox(engine=shop.engine, clock=shop.clock)
    kicker.register("test.post", deliver)
    first = asyncio.create_task(relay.run_due(limit=1))
    await started.wait()
    await kicker.kick("test.post", "x")()  # no "still on its way": it waited, then sent
    assert await first == []
    assert delivered == [0, 1, 2]  # in the order written, each once
    assert await undone(shop) == 0
