"""The board kept current where it is shown, as a person meets it: the whole app built as
serve builds it, its Slack App Homes published to the local fake Slack over HTTP
(testkit/fake_slack.py, which refuses a view beyond Block Kit's limits) and its Discord
status message posted to the local fake Discord's REST (testkit/fake_discord.py), on a
clock the test moves and an outbox relay the test runs. Each change worth showing asks
for a refresh in its own transaction, due at the end of a two-second window; a refresh
publishes only where the view changed: a request asked and approved, an incident declared
and told, a plan's waves and its halt, 500 requests waiting, a change whose process
stopped before its refresh. On SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa

from bot.boards import board_surfaces
from bot.bootstrap import App, build_app
from bot.boundary import answer
from bot.demo import DEMO_CONFIG
from bot.discord.setup import discord_notifier
from bot.render_text import render_message
from bot.worker import chat_notifier, chat_reach
from commands.context import Invocation
from commands.reply import Reply
from services.config import load_config
from services.db.tables import ChangeRequest
from services.notify import FanoutNotifier
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import FakeSlack
from tests.helpers.people import SLACK_ALICE, SLACK_BOB, SLACK_DORA
from tests.helpers.platforms import discord_env, slack_env
from tests.integration.support import START, Clock, simulated_worker

BOARD_CHANNEL = "200000000000000009"  # one of the fake Discord's channels
REQUESTS = cast(sa.Table, ChangeRequest.__table__)


@dataclass
class Homes:
    app: App
    posts: FanoutNotifier | None
    clock: Clock
    slack: FakeSlack
    discord: FakeDiscord | None
    failed: list[str]  # the workers queue's failed rows, each requested once at most

    async def typed(self, line: str, user: str) -> str:
        """``line`` typed on Slack by ``user``; the reply as text (refused or not)."""
        inv = Invocation(
            person=self.app.directory.by_account("slack", user),
            platform="slack",
            account=user,
            channel="C0OPS",
        )
        reply = await answer(self.app.router.handle_line(line, inv), correlation_id="t", where="t")
        assert isinstance(reply, Reply)
        return " ".join(render_message(reply.message).split())

    async def request(self, user: str = SLACK_ALICE) -> str:
        """``user`` asks to requeue one failed row of workers; the request's ref."""
        row = self.failed.pop()
        text = await self.typed(f'/queue requeue {row} --queue workers --reason "fixed"', user)
        found = re.search(r"CR-\d+", text)
        assert found, text
        return found.group(0)

    async def relay(self, seconds: float = 0.0) -> None:
        """``seconds`` go by, then the outbox delivers what is due."""
        self.clock.advance(seconds=seconds)
        assert await self.app.outbox.run_due() == []

    async def refreshes(self) -> int:
        """The board refreshes asked for so far (delivered or not)."""
        async with self.app.state_engine.connect() as conn:
            found = await conn.exec_driver_sql(
                "SELECT count(*) FROM qb_outbox WHERE kind = 'board.refresh'"
            )
            return int(found.scalar_one())

    def publishes(self, user: str) -> int:
        return sum(
            1 for c in self.slack.recorded("/api/views.publish") if c.body["user_id"] == user
        )


def home_text(view: dict[str, Any]) -> str:
    """Everything a person reads in a Home tab: headers, sections, buttons' labels."""
    parts: list[str] = []
    for block in view["blocks"]:
        if "text" in block:
            parts.append(str(block["text"]["text"]))
        for element in block.get("elements", []):
            parts.append(f"[{element['text']['text']}:{element['action_id']}]")
    return "\n".join(parts)


def home_of(homes: Homes, user: str) -> str:
    return home_text(homes.slack.homes[user])


@contextlib.asynccontextmanager
async def homes_app(
    db_url: str, tmp_path: Path, slack: FakeSlack, discord: FakeDiscord | None = None
) -> AsyncIterator[Homes]:
    """serve's app over the demo estate: Slack App Homes, and a Discord board where a fake
    Discord is given."""
    path = tmp_path / "queuebot.toml"
    extra = f'\n[discord]\nboard_channel = "{BOARD_CHANNEL}"\n' if discord else ""
    path.write_text(DEMO_CONFIG.format(config=path) + extra)
    environ = {"QUEUEBOT_DATABASE_URL": db_url, **slack_env(slack)}
    if discord is not None:
        environ.update(discord_env(discord))
    config = load_config(path, environ=environ)
    posts = chat_notifier(config, discord_notifier(config, rest_only=True))
    clock = Clock(START + timedelta(minutes=1))
    app = await build_app(
        config,
        clock=clock,
        notifier=posts,
        announce=False,
        reach=chat_reach(posts),
        surfaces=board_surfaces(config, posts),
    )
    try:
        async with app.estate.connect() as conn:
            rows = await conn.exec_driver_sql(
                "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' ORDER BY id"
            )
            failed = [str(r[0]) for r in rows]
        yield Homes(app, posts, clock, slack, discord, failed)
    finally:
        await app.close()
        if posts is not None:
            await posts.close()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack().start() as fake:
        yield fake


@pytest.fixture
async def homes(demo_db_url: str, tmp_path: Path, slack: FakeSlack) -> AsyncIterator[Homes]:
    async with homes_app(demo_db_url, tmp_path, slack) as built:
        yield built


async def test_a_request_appears_in_an_approvers_home_and_goes_once_approved(
    homes: Homes,
) -> None:
    boards = homes.app.boards
    assert boards is not None
    await boards.opened(platform="slack", account=SLACK_BOB)
    await homes.relay()
    assert "Nothing is waiting." in home_of(homes, SLACK_BOB)

    ref = await homes.request(SLACK_ALICE)
    await homes.relay(seconds=0.0)  # gathered: not yet
    assert ref not in home_of(homes, SLACK_BOB)
    await homes.relay(seconds=2.0)  # the end of its window: shown
    bob = home_of(homes, SLACK_BOB)
    number = ref.removeprefix("CR-")
    assert "Waiting for your approval (1)" in bob
    assert f"{ref}: requeue 1 row(s) in queue workers. Asked by alice" in bob
    assert f"[Approve {ref}:cr:approve:{number}]" in bob
    assert f"[Reject {ref}:cr:reject:{number}]" in bob

    published = homes.publishes(SLACK_BOB)
    await homes.app.scheduler.seed()  # as serve does at start: the minute's recount
    refreshes = await homes.refreshes()
    await homes.relay(seconds=60.0)
    ran = 0
    while ran < 20 and await homes.app.scheduler.run_one():
        ran += 1
    assert ran  # the recount ran ...
    await homes.relay()
    assert await homes.refreshes() == refreshes + 1  # ... and asked for a refresh, delivered
    assert homes.publishes(SLACK_BOB) == published  # nothing changed, nothing published

    refreshes = await homes.refreshes()
    said = await homes.typed(f"/queue approve {ref}", SLACK_BOB)
    assert "approved" in said.lower(), said
    # approved and executed: two audit events in two appends, one refresh asked
    assert await homes.refreshes() == refreshes + 1
    await homes.relay(seconds=2.0)
    bob = home_of(homes, SLACK_BOB)
    assert ref not in bob and "Nothing is waiting." in bob


async def test_each_person_sees_their_own_board(homes: Homes) -> None:
    boards = homes.app.boards
    assert boards is not None
    for user in (SLACK_ALICE, SLACK_BOB, SLACK_DORA):
        await boards.opened(platform="slack", account=user)
    ref = await homes.request(SLACK_ALICE)
    await homes.relay(seconds=2.0)
    assert ref in home_of(homes, SLACK_BOB).split("Your requests")[0]  # waits for bob
    alice = home_of(homes, SLACK_ALICE)
    assert "Waiting for your approval (0)" in alice
    assert "Your requests waiting for approval (1)" in alice and ref in alice
    assert "Approve" not in alice
    dora = home_of(homes, SLACK_DORA)
    assert "You do not hold the approver role" in dora and ref not in dora


async def test_an_incident_declared_then_told_is_shown_with_its_lead(homes: Homes) -> None:
    boards = homes.app.boards
    assert boards is not None
    await boards.opened(platform="slack", account=SLACK_BOB)
    await homes.relay()
    said = await homes.typed(
        '/incident declare gd:queue-loss "jobs stopped" --queue clips', SLACK_DORA
    )
    found = re.search(r"INC-\d+", said)
    assert found, said
    await homes.relay(seconds=2.0)
    bob = home_of(homes, SLACK_BOB)
    assert "Open incidents (1)" in bob
    assert f"{found.group(0)} (clips) jobs stopped: lead dora; operators due in" in bob
    said = await homes.typed("/incident notify operators", SLACK_DORA)
    await homes.relay(seconds=2.0)  # the message goes out, then the board shows it told
    await homes.relay(seconds=2.0)
    assert "operators told at" in home_of(homes, SLACK_BOB)


async def test_a_refresh_survives_the_process_that_made_the_change(
    demo_db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    """The change commits with its refresh; the process stops before its relay runs;
    the next process to start delivers it."""
    async with homes_app(demo_db_url, tmp_path, slack) as first:
        assert first.app.boards is not None
        await first.app.boards.opened(platform="slack", account=SLACK_BOB)
        await first.relay()
        ref = await first.request(SLACK_ALICE)  # and then it stops: no relay ran
    assert ref not in home_of(first, SLACK_BOB)
    async with homes_app(demo_db_url, tmp_path, slack) as second:
        second.clock.advance(minutes=1)
        await second.relay()
        assert ref in home_of(second, SLACK_BOB)


async def test_a_home_with_500_requests_waiting_stays_within_slacks_limits(
    homes: Homes,
) -> None:
    boards = homes.app.boards
    assert boards is not None
    await boards.opened(platform="slack", account=SLACK_BOB)
    ref = await homes.request(SLACK_ALICE)  # and 499 more like it
    async with homes.app.state_engine.begin() as conn:
        row = (
            (await conn.execute(sa.select(REQUESTS).where(REQUESTS.c.id == int(ref[3:]))))
            .mappings()
            .one()
        )
        copies = [
            {**{k: v for k, v in row.items() if k != "id"}, "reason": f"fixed, copy {n}"}
            for n in range(499)
        ]
        await conn.execute(REQUESTS.insert(), copies)
    refs = [ref, *range(499)]
    await homes.relay(seconds=2.0)
    view = homes.slack.homes[SLACK_BOB]  # the fake took it: within Block Kit's limits
    assert len(view["blocks"]) <= 100
    bob = home_text(view)
    assert f"Waiting for your approval ({len(refs)})" in bob
    assert f"{len(refs) - 10:,} more waiting: /queue pending lists every one." in bob
    assert not homes.slack.recorded("/api/views.publish#invalid")


async def test_a_plans_waves_and_its_halt_are_shown(homes: Homes) -> None:
    boards = homes.app.boards
    assert boards is not None
    await boards.opened(platform="slack", account=SLACK_BOB)
    await homes.relay()
    asked = await homes.typed(
        '/queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed"', SLACK_ALICE
    )
    found = re.search(r"CR-\d+", asked)
    assert found, asked
    said = await homes.typed(f"/queue approve {found.group(0)}", SLACK_BOB)
    assert "plan P-1 started with its sample of 2" in said, said
    await homes.relay(seconds=2.0)
    bob = home_of(homes, SLACK_BOB)
    assert "Active plans (1)" in bob
    assert "P-1 clips, running: ▱▱▱ 0/3 waves, 2/14 jobs redriven" in bob

    await simulated_worker(homes.app.state_engine, now=homes.clock())  # the sample succeeds
    for _ in range(20):  # the plan's ticks, until its next wave started
        homes.clock.advance(seconds=30)
        while await homes.app.scheduler.run_one():
            pass
        if "1/3 waves" in home_of(homes, SLACK_BOB):
            break
        await homes.relay(seconds=2.0)
    assert "P-1 clips, running: ▰▱▱ 1/3 waves" in home_of(homes, SLACK_BOB)

    said = await homes.typed('/queue halt P-1 --reason "customers report duplicates"', SLACK_BOB)
    await homes.relay(seconds=2.0)
    bob = home_of(homes, SLACK_BOB)
    assert "P-1 clips, HALTED" in bob
    assert "by bob: customers report duplicates" in bob
