"""A post that can be shown in one place only is delivered by a process that reaches it:
serve's relay posts to its chat platforms and leaves a console session's posts alone
(never tried, never failed, never closed as "not posted"); a console's relay prints its
own session's and no other's; and `/queue plan` says which of a plan's posts nobody was
shown, never that they were."""

from __future__ import annotations

import time

import sqlalchemy as sa

from bot.bootstrap import wire_services
from bot.console import session_reach
from services import outbox
from services.audit import AuditTrail
from services.changes.requests import ChangeRequests
from services.config import ApprovalConfig
from services.estate.ops import Selector
from services.outbox import Outbox, Reach
from services.plans.publish import unshown_words
from tests.helpers.people import ALICE, BOB
from tests.integration.support import FAST, Shop, add_dead_letters
from tests.integration.test_plans import ERROR, flat_history
from tests.kinds import ChangeKind

SERVE = Reach(platforms=frozenset({"slack", "discord"}))


async def posts(shop: Shop) -> dict[str | None, tuple[bool, int, str | None]]:
    """Each test post by its destination: (done, attempts, last error)."""
    async with shop.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT destination, done_at IS NOT NULL, attempts, last_error "
                    "FROM qb_outbox WHERE kind = 'test.post'"
                )
            )
        ).all()
    return {where: (bool(done), int(n), error) for where, done, n, error in rows}


async def test_each_relay_delivers_only_what_its_process_can_show(shop: Shop) -> None:
    places = [None, "slack:C0OPS", "discord:200", "console:tq0a1b.2c3", "console:tq0zzz.9"]
    async with shop.engine.begin() as conn:
        for n, where in enumerate(places):
            await outbox.add(
                conn,
                kind="test.post",
                subject=f"s{n}",
                payload={"n": n},
                now=shop.clock.now,
                destination=where,
            )
    shown: dict[str, list[str | None]] = {"serve": [], "console": []}

    def relay(name: str, reach: Reach) -> Outbox:
        made = Outbox(engine=shop.engine, clock=shop.clock, reach=reach)

        async def deliver(item: outbox.Item) -> None:
            shown[name].append(places[int(item.payload["n"])])

        made.register("test.post", deliver)
        return made

    assert await relay("serve", SERVE).run_due() == []
    assert await relay("console", session_reach("tq0a1b.2c3")).run_due() == []
    assert sorted(shown["serve"], key=str) == [None, "discord:200", "slack:C0OPS"]
    assert shown["console"] == ["console:tq0a1b.2c3"]  # its own session's only
    # the session nobody runs: its post waits, untried, with nothing said against it
    assert (await posts(shop))["console:tq0zzz.9"] == (False, 0, None)


async def test_a_kick_leaves_a_post_for_another_process_at_once(shop: Shop) -> None:
    """serve approving a plan asked for in a console session (or the console approving
    a Slack one) does not wait for, nor report as late, the post another process shows."""
    async with shop.engine.begin() as conn:
        await outbox.add(
            conn,
            kind="test.post",
            subject="x",
            payload={"n": 0},
            now=shop.clock.now,
            destination="console:tq0a1b.2c3",
        )
    kicker = Outbox(engine=shop.engine, clock=shop.clock, reach=SERVE)
    tried: list[int] = []

    async def deliver(item: outbox.Item) -> None:
        tried.append(int(item.payload["n"]))

    kicker.register("test.post", deliver)
    began = time.monotonic()
    await kicker.kick("test.post", "x")()  # no PostsDeferred: nothing of its own is late
    assert time.monotonic() - began < 2  # not the hand-over's ten seconds
    assert tried == []
    assert (await posts(shop))["console:tq0a1b.2c3"] == (False, 0, None)


async def request(shop: Shop, changes: ChangeRequests, origin: dict[str, str]) -> int:
    """A plan asked for at ``origin`` and approved through ``changes``: its number."""
    await add_dead_letters(shop.engine, count=20, error=ERROR)
    await flat_history(shop)
    view = await changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(error_like="pod evicted"),
        reason="eviction fixed",
        actor=ALICE,
        origin=origin,
    )
    decision = await changes.approve(number=view.number, actor=BOB)
    return int(decision.view.result.plan or 0) if decision.view.result else 0


async def test_the_plan_says_its_news_waits_for_slack_not_that_it_was_posted(
    shop: Shop,
) -> None:
    """A plan asked for in Slack, approved where no process posts to Slack: its news
    waits for serve, and `/queue plan` says so (and what failed, once something did)."""
    services = wire_services(  # this process: a console session, printing its own posts
        state_engine=shop.engine,
        estate=shop.estate,
        clock=shop.clock,
        approval=ApprovalConfig(),
        redrive=FAST,
        notifier=shop.notifier,
        audit=AuditTrail(),
        reach=session_reach("tq0a1b.2c3"),
    )
    plan = await request(shop, services.changes, {"platform": "slack", "channel": "C0OPS"})
    assert await services.outbox.run_due() == []
    news = await services.plans.unshown_news(number=plan)
    said = unshown_words(f"P-{plan}", news)
    assert news.waiting == 1 and news.where == "slack:C0OPS"
    assert said is not None and said.startswith(f"Not posted yet: 1 update(s) of P-{plan}'s")
    assert "waiting for queuebot serve to post them to slack channel C0OPS." in said
    assert shop.notifier.posts == []  # the console printed none of it


async def test_a_plan_whose_news_was_all_shown_says_nothing_of_it(shop: Shop) -> None:
    plan = await request(shop, shop.changes, {"platform": "console", "channel": "tq0a1b.2c3"})
    await shop.services.outbox.run_due()
    news = await shop.services.plans.unshown_news(number=plan)
    assert unshown_words(f"P-{plan}", news) is None
    assert shop.notifier.posts  # shown: the plan's message and its sample's start
