"""Chat posts a change makes cannot vanish: they are written with the change and
delivered by the outbox, retried until they go out, in order, once per relay pass.

Under an alert storm the relay still delivers what matters first: a channel held by
Slack's 429 holds only its own posts, an incident's escalation goes before queued alert
updates, the updates of one alert group collapse to its latest state, and a killed
relay's post comes back within seconds (while a live relay's slow post is never taken
over)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.running import running_scheduler
from commands.context import Invocation
from services import outbox
from services.db import create_engine
from services.db.migrate import upgrade
from services.message import Message
from services.notify import ChannelRef, MessageRef
from services.outbox import LEASE, Outbox
from services.scheduler import Scheduler
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.people import BOB, DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import alert, alert_bot, notification
from tests.integration.support import (
    RecordingNotifier,
    Shop,
    add_dead_letters,
    build_services,
    simulated_worker,
)
from tests.integration.test_plans import ERROR, flat_history, request_plan, tick

RELAY = Path(__file__).with_name("outbox_relay_process.py")
STUCK = {"alertname": "QueueStuck", "queue": "clips"}  # routed to #operators
QUIET = "\n" + DETECTORS_OFF


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


async def test_a_record_finished_with_its_item_is_made_once_when_a_dead_relays_item_is_redone(
    shop: Shop,
) -> None:
    async with shop.engine.begin() as conn:
        await outbox.add(conn, kind="test.post", subject="x", payload={}, now=shop.clock.now)
    recorded: list[int] = []

    async def deliver(item: outbox.Item) -> None:  # records what it did with the item
        async with shop.engine.begin() as conn:
            if await outbox.finish(conn, item, now=shop.clock.now):
                recorded.append(item.attempts)

    dying = Outbox(engine=shop.engine, clock=shop.clock)
    dying.register("test.post", deliver)
    claimed = await dying._claim("test.post", "x")
    assert claimed is not None
    await deliver(claimed)  # delivered and recorded, then killed before marking it done
    slow = Outbox(engine=shop.engine, clock=shop.clock)
    slow.register("test.post", deliver)
    shop.clock.advance(seconds=LEASE.total_seconds() + 1)
    assert await slow.run_due() == [] and recorded == [1]  # done with its record: not redone

    async with shop.engine.begin() as conn:
        await outbox.add(conn, kind="test.post", subject="y", payload={}, now=shop.clock.now)
    overtaken = await dying._claim("test.post", "y")  # a relay whose lease ran out ...
    assert overtaken is not None
    shop.clock.advance(seconds=LEASE.total_seconds() + 1)
    assert await slow.run_due() == [] and recorded == [1, 2]  # ... another delivered it
    await deliver(overtaken)  # the first one's late delivery records nothing
    assert recorded == [1, 2]


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


# -- under an alert storm ---------------------------------------------------------------


def storm_group(n: int) -> dict[str, str]:
    return {"alertname": f"Storm{n}", "queue": "clips"}  # no route: to #alerts


async def until(found: Callable[[], Any], *, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while not (result := found()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s")
        await asyncio.sleep(0.02)
    return result


async def test_a_channel_held_by_429_does_not_delay_another_channels_post(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=QUIET) as bot:
        for n in range(100):  # a storm in #alerts, written first
            group = storm_group(n)
            await bot.send(notification(group=group, alerts=[alert(f"s{n}", labels=group)]))
        await bot.send(notification(group=STUCK, alerts=[alert("k1", labels=STUCK)]))
        while await bot.app.alerts.process_due():
            pass
        bot.fake.hold("C0ALERTS", retry_after=2)  # Slack refuses #alerts for now
        async with running_scheduler(bot.app):  # the relay as serve runs it
            try:
                (ops,) = await until(lambda: bot.roots("C0OPS"), within=20, what="#operators")
                refused = await until(
                    lambda: bot.fake.recorded("/api/chat.postMessage#429"), within=5, what="429"
                )
                assert bot.roots("C0ALERTS") == []  # #alerts still waits out its Retry-After
            finally:
                bot.fake.release("C0ALERTS")
        # #operators went out while #alerts waited out its first Retry-After (2 s)
        waited = ops.at - refused[0].at
        assert waited < 2, f"#operators waited {waited:.1f} s behind #alerts"


@pytest.mark.slow  # a storm of 300 queued posts
async def test_a_due_escalation_goes_before_300_queued_alert_updates(
    db_url: str, tmp_path: Path
) -> None:
    extra = (
        QUIET
        + DORA_TOML
        + DUTY_OFFICER_TOML
        + '\n[incidents.audiences]\noperators = ["alerts"]\nactors = ["alerts"]\n'
    )

    async with alert_bot(db_url, tmp_path, extra=extra) as bot:
        app = bot.app
        dora = Invocation(
            person=app.directory.by_name("dora"),
            platform="slack",
            account="U0DORA",
            channel="C0ALERTS",
        )
        declared = await app.router.handle_line(
            '/incident declare gd:queue-loss "clips lost jobs" --queue clips', dora
        )
        assert "INC-1" in declared.message.summary
        for n in range(30):
            group = storm_group(n)
            await bot.send(notification(group=group, alerts=[alert(f"s{n}", labels=group)]))
        while await app.alerts.process_due():
            pass
        await app.outbox.run_due()  # the checklist and 30 roots are out
        for change in range(1, 6):  # five changes to each group: 300 updates queued
            for n in range(30):
                group = storm_group(n)
                members = [
                    alert(f"s{n}x{k}", labels={**group, "i": str(k)}) for k in range(change + 1)
                ]
                answer = await bot.send(notification(group=group, alerts=members))
                assert answer.status_code == 200, answer.text
        while await app.alerts.process_due():
            pass
        async with app.state_engine.connect() as conn:
            queued = await conn.execute(
                sa.text("SELECT count(*) FROM qb_outbox WHERE done_at IS NULL")
            )
            assert queued.scalar_one() == 300  # 30 groups x 5 x (news + root update)
        bot.clock.advance(minutes=6)  # the operators had 5 minutes: nobody told them
        assert await app.scheduler.run_due() >= 1
        before = len(bot.fake.recorded("/api/chat."))
        await app.outbox.run_due(limit=1000)
        calls = bot.fake.recorded("/api/chat.")[before:]
        escalations = [
            n for n, c in enumerate(calls) if "were not told in time" in str(c.body.get("text"))
        ]
        assert len(escalations) == 2
        # the thread's and #alerts' escalations go out with the first alert update or two
        assert max(escalations) <= 2, escalations
        # and every group's latest state after them (its older updates superseded)
        assert len(calls) == 2 + 30 * 2


async def test_fifty_updates_of_one_group_collapse_to_its_latest_state(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=QUIET) as bot:
        group = {"alertname": "Flapping", "queue": "clips"}
        members = [alert("f0", labels={**group, "instance": "i0"})]
        await bot.send(notification(group=group, alerts=members))
        for n in range(1, 51):  # 50 changes while it fires: one more alert each time
            members.append(alert(f"f{n}", labels={**group, "instance": f"i{n}"}))
            await bot.send(notification(group=group, alerts=members))
        ended = [{**a, "status": "resolved", "endsAt": "2026-11-30T12:30:00Z"} for a in members]
        await bot.send(notification(group=group, alerts=ended))
        while await bot.app.alerts.process_due():  # all of it before the relay gets to it
            pass
        await bot.app.outbox.run_due(limit=1000)

        (root,) = bot.roots("C0ALERTS")  # the root is never lost
        (resolution,) = bot.replies(root)  # nor the resolution; the news it made stale is
        assert "All alerts of this group are resolved" in str(resolution.body["blocks"])
        assert "51 alert(s) resolved" in str(resolution.body["blocks"])
        (update,) = bot.updates()  # one root update: the final state
        assert update.body["ts"] == root.ts
        assert "RESOLVED: Flapping" in str(update.body["blocks"])
        async with bot.app.state_engine.connect() as conn:
            superseded = (
                await conn.execute(
                    sa.text(
                        "SELECT count(*) FROM qb_outbox WHERE superseded_by IS NOT NULL "
                        "AND done_at IS NOT NULL"
                    )
                )
            ).scalar_one()
            left = (
                await conn.execute(sa.text("SELECT count(*) FROM qb_outbox WHERE done_at IS NULL"))
            ).scalar_one()
        assert (superseded, left) == (50 + 50, 0)  # the news of 50 changes, 50 root updates


# -- leases -----------------------------------------------------------------------------


def utcnow() -> datetime:
    return datetime.now(UTC)


async def one_post(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await outbox.add(conn, kind="test.post", subject="x", payload={}, now=utcnow())


@pytest.mark.postgres
async def test_a_killed_relays_post_comes_back_within_seconds(pg_url: str) -> None:
    engine = create_engine(pg_url)
    await upgrade(engine)
    await one_post(engine)
    # The killed relay's lease is 2 s (not 10): its item comes due again that much sooner.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(RELAY), pg_url, "2", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        said = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert said.startswith(b"delivering"), said
        proc.kill()  # SIGKILL mid-delivery: its lease is held, and nobody renews it
        await proc.wait()
        killed = time.monotonic()
        delivered: list[int] = []

        async def deliver(item: outbox.Item) -> None:
            delivered.append(item.attempts)

        relay = Outbox(engine=engine, clock=utcnow)
        relay.register("test.post", deliver)
        stop = asyncio.Event()
        running = asyncio.create_task(relay.run_forever(stop, interval=0.1))
        try:
            await until(lambda: delivered, within=20, what="the killed relay's post")
        finally:
            stop.set()
            await running
        took = time.monotonic() - killed
        assert delivered == [2]  # the second attempt, once
        assert took < 15, f"the post came back {took:.1f} s after the kill"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await engine.dispose()


async def test_a_live_relays_slow_post_is_not_taken_over(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # renewed every 0.5 s as it runs: another relay takes it over only if no renewal
    # lands for 2 s (a shorter lease was taken over on a saturated two-core CI host, where
    # the loop or a commit stalled for most of 0.8 s)
    monkeypatch.setattr(outbox.store, "LEASE", timedelta(seconds=2))
    engine = create_engine(db_url)
    await upgrade(engine)
    try:
        await one_post(engine)
        delivered: list[str] = []
        posting = asyncio.Event()

        async def slow(item: outbox.Item) -> None:  # Slack's Retry-After, waited out
            posting.set()
            await asyncio.sleep(2.5)  # past the first lease: only renewals keep it
            delivered.append("slow")

        async def fast(item: outbox.Item) -> None:
            delivered.append("another relay")

        live = Outbox(engine=engine, clock=utcnow)
        live.register("test.post", slow)
        other = Outbox(engine=engine, clock=utcnow)
        other.register("test.post", fast)
        first = asyncio.create_task(live.run_due())
        await posting.wait()
        while not first.done():  # the other relay keeps looking while the slow post runs
            await other.run_due()
            await asyncio.sleep(0.05)
        assert await first == []
        assert delivered == ["slow"]
    finally:
        await engine.dispose()
