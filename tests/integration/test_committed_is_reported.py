"""A committed change is reported as done, whatever happens after the commit; a database
that fails before it says nothing was changed. Through the command router, on SQLite and
PostgreSQL, as a person in chat would see it."""

from __future__ import annotations

import asyncio
import time

import sqlalchemy as sa

from bot.boundary import answer
from bot.render_text import render_message
from commands.context import Invocation
from commands.deps import Deps
from commands.reply import Reply
from commands.router import Router
from services.after_commit import ANSWER_WAITS
from services.config import AccessConfig, default_queues
from services.db import create_engine
from services.estate.estate import Estate
from services.message import Message
from services.notify import ChannelRef, MessageRef
from services.people import Directory, Person
from services.plans.model import PlanState
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.helpers.people import ALICE_APPROVER, BOB_APPROVER
from tests.integration.support import RecordingNotifier, Shop, add_dead_letters, build_services
from tests.integration.test_plans import ERROR, flat_history, request_plan


class BrokenChat(RecordingNotifier):
    """A chat platform that takes nothing: every post fails (Slack down, token revoked)."""

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        raise ConnectionError("chat.postMessage: connection refused")

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        raise ConnectionError("chat.update: connection refused")


class HeldChat(RecordingNotifier):
    """A chat platform whose channels take no post until ``release``: a channel waiting
    out a 429's long Retry-After."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        await self.open.wait()
        return await super().post(channel=channel, message=message, thread=thread)


def router_over(shop: Shop, chat: RecordingNotifier) -> Router:
    services = build_services(shop.engine, shop.estate, shop.clock, chat)
    deps = Deps(
        reads=QueueReads(shop.estate, gate=ReadGate(fresh_for=0.0)),
        changes=services.changes,
        plans=services.plans,
        directory=Directory([ALICE_APPROVER, BOB_APPROVER]),
        access=AccessConfig(),
    )
    return Router(deps)


async def say(router: Router, line: str, person: Person) -> Reply:
    """A line typed in chat, through the error boundary every adapter puts around it."""
    inv = Invocation(person=person, platform="console", account=person.name, channel="ops")
    reply = await answer(router.handle_line(line, inv), correlation_id="t", where="test")
    assert isinstance(reply, Reply)
    return reply


async def plan_state(shop: Shop) -> str:
    async with shop.engine.connect() as conn:
        return str((await conn.execute(sa.text("SELECT state FROM qb_plans"))).scalar_one())


async def test_a_halt_whose_chat_post_fails_is_reported_as_done(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=40, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    router = router_over(shop, BrokenChat())

    approved = await say(router, f"/queue approve CR-{number}", BOB_APPROVER)
    assert not approved.error
    assert "approved by bob and executed" in approved.message.summary
    assert "the chat post about it failed" in approved.message.summary

    halted = await say(router, '/queue halt P-1 --reason "looks wrong"', ALICE_APPROVER)
    text = render_message(halted.message)
    assert not halted.error, text
    assert "P-1 halted by alice: looks wrong" in text and "Temporarily unavailable" not in text
    assert "the chat post about it failed" in text and "connection refused" in text
    assert await plan_state(shop) == PlanState.HALTED

    again = await say(router, "/queue halt P-1", ALICE_APPROVER)
    assert again.error
    assert "P-1 is halted; only a running plan can be halted" in again.message.summary


async def test_an_approval_is_answered_before_its_held_chat_post_and_says_so(
    shop: Shop,
) -> None:
    await add_dead_letters(shop.engine, count=10, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    chat = HeldChat()
    router = router_over(shop, chat)

    started = time.monotonic()
    async with asyncio.timeout(10):  # (before: the answer waited for the channel, forever)
        approved = await say(router, f"/queue approve CR-{number}", BOB_APPROVER)
    waited = time.monotonic() - started
    assert waited < ANSWER_WAITS + 1.5, waited  # not the channel's wait
    assert not approved.error
    assert "approved by bob and executed" in approved.message.summary
    assert "have not all gone out yet" in approved.message.summary
    assert "failed" not in approved.message.summary  # nothing failed: it waits its turn
    assert chat.posts == []

    chat.open.set()  # the channel takes posts again: the plan's message goes out behind
    for _ in range(100):
        if chat.posts:
            break
        await asyncio.sleep(0.02)
    assert chat.texts()[0].startswith("P-1:")


async def test_a_database_gone_before_an_approval_changes_nothing_and_says_so(
    shop: Shop, db_url: str
) -> None:
    await add_dead_letters(shop.engine, count=5, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    # The database's address now leads nowhere (a failover, a wrong DNS answer).
    nowhere = (
        "postgresql://postgres@127.0.0.1:1/queuebot"
        if db_url.startswith("postgresql")
        else "sqlite:////nonexistent-dir/queuebot.db"
    )
    broken = create_engine(nowhere)
    try:
        estate = Estate(engine=broken, queues=default_queues(), clock=shop.clock)
        services = build_services(broken, estate, shop.clock, RecordingNotifier())
        router = Router(
            Deps(
                reads=QueueReads(estate, gate=ReadGate(fresh_for=0.0)),
                changes=services.changes,
                plans=services.plans,
                directory=Directory([ALICE_APPROVER, BOB_APPROVER]),
                access=AccessConfig(),
            )
        )
        reply = await say(router, f"/queue approve CR-{number}", BOB_APPROVER)
    finally:
        await broken.dispose()
    assert reply.error
    assert reply.message.summary.startswith("Database unavailable: the database ")
    assert "nothing was changed" in reply.message.summary
    async with shop.engine.connect() as conn:
        state = (await conn.execute(sa.text("SELECT state FROM qb_change_requests"))).scalar_one()
    assert state == "pending"  # neither approved nor executed
