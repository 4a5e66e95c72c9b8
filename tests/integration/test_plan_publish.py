"""A plan's message is posted once, however many publishers reach it at the same moment
(a tick and an approval, two replicas), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from services.ledger import DeliveryLedger
from services.message import Message
from services.notify import ChannelRef, MessageRef
from services.plans.model import Note
from services.plans.publish import PlanPublisher
from tests.helpers.people import BOB
from tests.integration.support import RecordingNotifier, Shop, add_dead_letters
from tests.integration.test_plans import ERROR, flat_history, request_plan

STALE = timedelta(minutes=2)


class SlowNotifier(RecordingNotifier):
    """Takes its time to post, as Slack does under a rate limit."""

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        await asyncio.sleep(0.3)
        return await super().post(channel=channel, message=message, thread=thread)


async def started_plan_without_message(shop: Shop) -> int:
    await add_dead_letters(shop.engine, count=20, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    result = (await shop.changes.approve(number=number, actor=BOB)).view.result
    assert result is not None and result.plan is not None
    plan = result.plan
    async with shop.engine.begin() as conn:  # as if the approval's own post had not run
        await conn.execute(sa.text("UPDATE qb_plans SET message_ref = NULL"))
        await conn.execute(sa.text("DELETE FROM qb_deliveries WHERE key LIKE 'plan:%'"))
    return int(plan)


def publisher(shop: Shop, notifier: RecordingNotifier, **kw: Any) -> PlanPublisher:
    return PlanPublisher(
        engine=shop.engine,
        notifier=notifier,
        ledger=DeliveryLedger(engine=shop.engine, clock=shop.clock),
        **kw,
    )


async def test_two_publishers_at_once_post_one_plan_message(shop: Shop) -> None:
    plan = await started_plan_without_message(shop)
    slow = SlowNotifier()
    await asyncio.gather(
        publisher(shop, slow).publish(plan, [Note("first news")]),
        publisher(shop, slow).publish(plan, [Note("second news")]),
    )
    in_channel = [p for p in slow.posts if p.where == "ops"]
    assert len(in_channel) == 1
    assert in_channel[0].message.summary.startswith(f"P-{plan}:")
    news = [p.message.summary for p in slow.posts if p.where == "thread 1"]  # under it
    assert len(news) == 2
    assert any("first news" in n for n in news) and any("second news" in n for n in news)
    assert any(p.update for p in slow.posts)  # the second one brought the message up to date


async def test_a_claim_left_by_a_dead_publisher_is_taken_over(shop: Shop) -> None:
    plan = await started_plan_without_message(shop)
    ledger = DeliveryLedger(engine=shop.engine, clock=shop.clock)
    assert await ledger.claim(f"plan:{plan}:message", stale_after=STALE)
    # its holder dies here; a publisher meanwhile waits, then posts the news unthreaded
    notifier = RecordingNotifier()
    await publisher(shop, notifier, wait=0.3).publish(plan, [Note("while claimed")])
    assert [p.where for p in notifier.posts] == ["ops"]
    assert "while claimed" in notifier.posts[0].message.summary

    shop.clock.advance(minutes=3)  # the claim is stale now
    later = RecordingNotifier()
    await publisher(shop, later).publish(plan, [Note("after")])
    assert [p.where for p in later.posts] == ["ops", "thread 1"]
    async with shop.engine.connect() as conn:
        stored = (await conn.execute(sa.text("SELECT message_ref FROM qb_plans"))).scalar_one()
    assert stored is not None


async def test_a_dead_publishers_claim_is_taken_over_within_seconds(shop: Shop) -> None:
    plan = await started_plan_without_message(shop)
    ledger = DeliveryLedger(engine=shop.engine, clock=shop.clock)
    assert await ledger.claim(f"plan:{plan}:message", stale_after=STALE)  # then it dies
    shop.clock.advance(seconds=11)  # nobody refreshed it since
    later = RecordingNotifier()
    await publisher(shop, later, wait=3).publish(plan, [Note("after")])
    assert [p.where for p in later.posts] == ["ops", "thread 1"]  # the message, threaded


class HeldNotifier(RecordingNotifier):
    """Posts only when let go: a post waiting out Slack's Retry-After."""

    def __init__(self) -> None:
        super().__init__()
        self.posting = asyncio.Event()
        self.go = asyncio.Event()

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        self.posting.set()
        await self.go.wait()
        return await super().post(channel=channel, message=message, thread=thread)


async def test_a_live_publishers_slow_post_keeps_its_claim(shop: Shop) -> None:
    plan = await started_plan_without_message(shop)
    held = HeldNotifier()
    first = asyncio.create_task(publisher(shop, held).publish(plan, [Note("first")]))
    await held.posting.wait()
    shop.clock.advance(seconds=11)  # longer than a claim lasts unrefreshed ...
    key = f"plan:{plan}:message"
    for _ in range(200):  # ... but the poster refreshes it (every 2 s)
        if await seen_at(shop, key) >= shop.clock.now:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the poster never refreshed its claim")
    second = RecordingNotifier()
    await publisher(shop, second, wait=0.3).publish(plan, [Note("second")])
    held.go.set()
    await first
    assert [p.where for p in second.posts] == ["ops"]  # no second plan message: unthreaded
    assert [p.where for p in held.posts] == ["ops", "thread 1"]


async def seen_at(shop: Shop, key: str) -> Any:
    async with shop.engine.connect() as conn:
        found = (
            await conn.execute(
                sa.text("SELECT seen_at FROM qb_deliveries WHERE key = :k"), {"k": key}
            )
        ).scalar_one()
    if isinstance(found, str):  # SQLite
        found = datetime.fromisoformat(found)
    return found if found.tzinfo else found.replace(tzinfo=UTC)


async def test_a_stale_claim_goes_to_one_caller_only(shop: Shop) -> None:
    ledger = DeliveryLedger(engine=shop.engine, clock=shop.clock)
    first = await ledger.claim("work:1", stale_after=STALE)
    assert first is not None
    assert await ledger.claim("work:1", stale_after=STALE) is None
    shop.clock.advance(minutes=3)
    taken = await asyncio.gather(*(ledger.claim("work:1", stale_after=STALE) for _ in range(4)))
    winners = [t for t in taken if t is not None]
    assert len(winners) == 1
    await ledger.release(first)  # the old holder gives back what is no longer its
    assert await ledger.claim("work:1", stale_after=STALE) is None
    await ledger.release(winners[0])
    assert await ledger.claim("work:1", stale_after=STALE) is not None


async def claimed(shop: Shop, key: str) -> bool:
    async with shop.engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT 1 FROM qb_deliveries WHERE key = :k"), {"k": key}
        )
        return found.first() is not None


class NowhereNotifier(RecordingNotifier):
    """A platform that takes nothing (no channel configured): every post returns no ref."""

    def __init__(self) -> None:
        super().__init__()
        self.posting = asyncio.Event()

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        self.posting.set()
        await asyncio.sleep(0.2)
        return []


async def test_a_publisher_that_could_not_post_lets_the_next_one_post(shop: Shop) -> None:
    plan = await started_plan_without_message(shop)
    nowhere = NowhereNotifier()
    first = asyncio.create_task(publisher(shop, nowhere).publish(plan, []))
    await nowhere.posting.wait()  # the first one holds the claim and is posting
    later = RecordingNotifier()
    await publisher(shop, later, wait=60).publish(plan, [Note("news")])
    await first
    # the second one took the claim the first gave back and posted the plan message itself
    # (had it waited its time out, its news would have gone to the channel unthreaded)
    assert [p.where for p in later.posts] == ["ops", "thread 1"]
