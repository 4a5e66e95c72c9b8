"""Who is on call, asked in the console on a frozen clock: a schedule's holder now, until
when and who is next, and the next person once the shift hands over; a Slack user group
read through its reader, then read stale when Slack stops answering, then not known; an
owned queue's team and its members; an unknown rota named with the rotas there are."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.bootstrap import App, build_app
from bot.console import Console
from bot.demo import DEMO_CONFIG
from bot.render_text import render_message
from services.access import Source
from services.config import load_config
from tests.conftest import templates

START = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)  # a Thursday: dora's week, since Monday 09:00

ROTAS = """
[rotas."operations duty officer"]       # the shipped runbooks' declaring authority
schedule = { start = "2026-12-07T09:00:00Z", every = "7d", people = ["dora", "bob"] }

[rotas."rota:prod-ops"]
slack_usergroup = "S0PRODOPS"

[teams.billing]
people = ["alice"]
rotas = ["rota:prod-ops"]
"""


@dataclass
class SlackGroups:
    """The Slack edge (a ``Reader``): a user group's members, or Slack not answering."""

    groups: dict[str, frozenset[str]] = field(default_factory=dict)
    down: bool = False

    async def members(self, source: Source) -> frozenset[str]:
        if self.down:
            raise ConnectionError("Slack did not answer usergroups.users.list")
        return self.groups[source.id]


@dataclass
class Desk:
    app: App
    console: Console
    now: list[datetime]
    slack: SlackGroups

    async def say(self, line: str) -> str:
        reply = await self.console.answer(line)
        text = render_message(reply.message)
        assert not reply.error, text
        return text

    async def refused(self, line: str) -> str:
        reply = await self.console.answer(line)
        assert reply.error, render_message(reply.message)
        return render_message(reply.message)

    def advance(self, **delta: float) -> None:
        self.now[0] += timedelta(**delta)


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[Desk]:
    path = tmp_path / "queuebot.toml"
    owned = DEMO_CONFIG.replace(
        'profile = "message_job"\n', 'profile = "message_job"\nowners = ["billing"]\n', 1
    )
    path.write_text(owned.format(config=path) + ROTAS)
    db_url = templates().sqlite("migrated", tmp_path)
    config = load_config(path, environ={"QUEUEBOT_DATABASE_URL": db_url})
    now = [START]
    app = await build_app(config, clock=lambda: now[0], announce=False)
    slack = SlackGroups({"S0PRODOPS": frozenset({"U0BOB", "U0ZED"})})
    assert app.standings is not None
    app.standings.membership.add_reader("slack", slack)
    console = Console(
        router=app.router, directory=app.directory, out=io.StringIO(), acting_as="alice"
    )
    try:
        yield Desk(app, console, now, slack)
    finally:
        await app.close()


async def test_a_schedule_says_who_now_until_when_and_who_next_then_hands_over(
    desk: Desk,
) -> None:
    one = await desk.say('/incident whois "Operations  Duty Officer"')
    assert "== operations duty officer ==" in one
    assert "source: schedule (dora, bob, every 1 week)" in one
    assert "now: dora, until 2026-12-14 09:00 UTC" in one
    assert "next: bob, from 2026-12-14 09:00 UTC" in one
    # the shipped runbooks' declaring authority is this rota
    assert "may declare: gd:dlq-redrive, gd:failed-jobs-accumulating, gd:queue-loss" in one

    desk.advance(days=3, hours=20, minutes=59, seconds=59)  # 08:59:59 on Monday: still dora's
    assert "now: dora, until" in await desk.say('/incident whois "operations duty officer"')
    desk.advance(seconds=1)  # 09:00: the shift hands over
    one = await desk.say('/incident whois "operations duty officer"')
    assert "now: bob, until 2026-12-21 09:00 UTC" in one
    assert "next: dora, from 2026-12-21 09:00 UTC" in one


async def test_oncall_lists_every_rota_and_each_owned_queues_team(desk: Desk) -> None:
    text = await desk.say("/queue oncall")
    rows = text.splitlines()
    (duty,) = [r for r in rows if r.startswith("operations duty officer ")]
    assert duty.split()[3:9] == ["dora", "2026-12-14", "09:00", "UTC", "bob", "schedule"]
    (prod,) = [r for r in rows if r.startswith("rota:prod-ops ")]
    assert "bob, slack:U0ZED" in prod and "Slack user group S0PRODOPS" in prod
    (clips,) = [r for r in rows if r.startswith("clips ")]
    # alice by name, and the rota's holders as read from Slack: a member [people] does
    # not name is shown by account
    assert "billing" in clips and "alice, bob, slack:U0ZED" in clips
    assert "[people] alice; rota rota:prod-ops" in clips
    assert "One approval of each change to an owned queue must be an owner's." in text
    assert "workers " not in text  # not owned


async def test_a_group_that_stops_answering_is_shown_stale_then_not_known(desk: Desk) -> None:
    assert "now: bob, slack:U0ZED" in await desk.say("/incident whois rota:prod-ops")
    desk.slack.down = True
    desk.advance(minutes=2)  # past the minute a read is kept fresh
    stale = await desk.say("/incident whois rota:prod-ops")
    assert "now: bob, slack:U0ZED" in stale
    assert "its members as read at 12:00:00 UTC are shown" in stale
    assert "for at most 10 minutes after that read" in stale
    desk.advance(minutes=9)  # 11 minutes after the last good read: nothing from it
    gone = await desk.say("/queue oncall")
    (prod,) = [r for r in gone.splitlines() if r.startswith("rota:prod-ops ")]
    assert "not known (below)" in prod and "bob" not in prod
    assert "rota:prod-ops: Slack user group S0PRODOPS cannot be read (ConnectionError" in gone
    assert "nothing it grants is given" in gone
    (clips,) = [r for r in gone.splitlines() if r.startswith("clips ")]
    assert "alice; who else is not known (below)" in clips


async def test_an_unknown_rota_is_refused_naming_the_rotas(desk: Desk) -> None:
    text = await desk.refused("/incident whois rota:nope")
    assert "no rota named 'rota:nope'; the rotas are: operations duty officer, rota:prod-ops" in (
        text
    )


async def test_whois_without_a_slack_reader_says_the_token_is_missing(desk: Desk) -> None:
    assert desk.app.standings is not None
    del desk.app.standings.membership.readers["slack"]
    text = await desk.say("/incident whois rota:prod-ops")
    assert "now: not known: Slack user group S0PRODOPS cannot be read (SLACK_BOT_TOKEN" in text


async def test_runbooks_name_the_rota_that_decides_who_declares(desk: Desk) -> None:
    text = await desk.say("/incident runbooks gd:queue-loss")
    assert (
        "declared by: operations duty officer (operations duty officer on shift): rota "
        "operations duty officer, now: dora, until 2026-12-14 09:00 UTC, then bob"
    ) in text
    # an authority no rota bears is still the queuebot role [roles] maps it to
    assert "detected by: service on-call (queue service on-call), queuebot role operator: " in text
