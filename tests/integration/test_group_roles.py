"""Roles, owners and rotas read from Slack user groups, as a person on Slack meets them,
on a clock the test moves: the whole app built as serve builds it, its Slack reader
wired to the local fake Slack (testkit/fake_slack.py) over HTTP, each command through
the router as Slack's adapter hands it over. Within a minute a group's members are read
once; after it they are read again; when Slack stops answering, the last read is used,
said to be stale, for ten minutes after it was made, and then nothing it grants is
given, in one line naming the group. A built-in schedule hands a rota over at its
boundary. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from bot.bootstrap import App, build_app
from bot.boundary import answer
from bot.readers import attach_slack_reader
from bot.render_text import render_message
from bot.slack.app import PooledWebClient
from commands.context import Invocation
from commands.reply import Reply
from services.config import load_config
from testkit.fake_slack import FakeSlack
from tests.helpers.groups import APPROVERS, DUTY_ROTA, SLACK_CAROL, groups_config
from tests.helpers.people import SLACK_ALICE, SLACK_BOB, SLACK_DORA
from tests.helpers.platforms import slack_env
from tests.integration.support import START, Clock


@dataclass
class Team:
    app: App
    clock: Clock
    fake: FakeSlack
    failed: list[str]  # the workers queue's failed rows, each requested once at most

    async def said(self, line: str, user: str) -> tuple[bool, str]:
        """``line`` typed on Slack by ``user``: (refused, the reply as text)."""
        inv = Invocation(
            person=self.app.directory.by_account("slack", user),
            platform="slack",
            account=user,
            channel="C0OPS",
        )
        reply = await answer(self.app.router.handle_line(line, inv), correlation_id="t", where="t")
        assert isinstance(reply, Reply)
        return reply.error, " ".join(render_message(reply.message).split())

    async def ok(self, line: str, user: str) -> str:
        refused, text = await self.said(line, user)
        assert not refused, text
        return text

    async def refused(self, line: str, user: str) -> str:
        refused, text = await self.said(line, user)
        assert refused, text
        return text

    async def request(self) -> int:
        """alice asks to requeue one failed row of workers; the request's number."""
        row = self.failed.pop()
        text = await self.ok(f'/queue requeue {row} --queue workers --reason "fixed"', SLACK_ALICE)
        found = re.search(r"CR-(\d+)", text)
        assert found, text
        return int(found.group(1))


async def team_of(db_url: str, tmp_path: Path, fake: FakeSlack, config: str) -> Team:
    path = tmp_path / "queuebot.toml"
    path.write_text(config)
    clock = Clock(START + timedelta(minutes=1))
    environ = {"QUEUEBOT_DATABASE_URL": db_url, **slack_env(fake)}
    app = await build_app(load_config(path, environ=environ), clock=clock, announce=False)
    assert attach_slack_reader(app.config, app)
    async with app.estate.connect() as conn:
        rows = await conn.exec_driver_sql(
            "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' ORDER BY id"
        )
        failed = [str(r[0]) for r in rows]
    return Team(app, clock, fake, failed)


async def close(team: Team) -> None:
    reader = team.app.standings.membership.readers["slack"] if team.app.standings else None
    client = getattr(reader, "client", None)
    if isinstance(client, PooledWebClient):
        await client.aclose()
    await team.app.close()


@pytest.fixture
def fake() -> AsyncIterator[FakeSlack]:
    with FakeSlack().start() as slack:
        yield slack  # type: ignore[misc]


@pytest.fixture
async def team(demo_db_url: str, tmp_path: Path, fake: FakeSlack) -> AsyncIterator[Team]:
    fake.usergroups.update({APPROVERS: [SLACK_BOB, SLACK_CAROL], "S0CLIPS": [], "S0PRODOPS": []})
    built = await team_of(demo_db_url, tmp_path, fake, groups_config())
    try:
        yield built
    finally:
        await close(built)


async def test_a_group_is_read_once_a_minute_and_a_member_removed_loses_the_role_after_it(
    team: Team,
) -> None:
    first = await team.request()
    assert "approved by bob and executed" in await team.ok(f"/queue approve CR-{first}", SLACK_BOB)
    assert team.fake.group_calls[APPROVERS] == 1  # the request and the approval: one read

    team.fake.usergroups[APPROVERS] = [SLACK_CAROL]  # bob leaves; Slack sends no event
    second = await team.request()
    team.clock.advance(seconds=59)
    # within the minute, what was read stands: bob is still an approver
    assert "approved by bob and executed" in await team.ok(f"/queue approve CR-{second}", SLACK_BOB)
    assert team.fake.group_calls[APPROVERS] == 1

    third = await team.request()
    team.clock.advance(seconds=1)  # a minute after the read
    refusal = await team.refused(f"/queue approve CR-{third}", SLACK_BOB)
    assert refusal == (
        "== Not allowed == /queue approve needs the approver role; bob has: viewer, operator."
    )
    assert team.fake.group_calls[APPROVERS] == 2
    assert "approved by carol and executed" in await team.ok(
        f"/queue approve CR-{third}", SLACK_CAROL
    )


async def test_a_group_slack_cannot_read_is_used_stale_for_ten_minutes_then_grants_nothing(
    team: Team,
) -> None:
    first = await team.request()  # the group read at 03:01:00
    read_at = team.clock.now
    team.fake.fail_groups()
    team.clock.advance(minutes=1)
    approved = await team.ok(f"/queue approve CR-{first}", SLACK_BOB)
    assert "approved by bob and executed" in approved
    assert (
        f"Note: Slack user group {APPROVERS} did not answer (Slack answered "
        f"HTTP 500): its members as read at {read_at:%H:%M:%S} UTC are used, for at most 10 "
        "minutes after that read." in approved
    )

    second = await team.request()
    team.clock.now = read_at + timedelta(minutes=9, seconds=59)
    assert "approved by bob" in await team.ok(f"/queue approve CR-{second}", SLACK_BOB)

    third = await team.request()
    team.clock.now = read_at + timedelta(minutes=10)
    refusal = await team.refused(f"/queue approve CR-{third}", SLACK_BOB)
    # one line, naming the group that grants the role (and the others not read either)
    assert refusal.startswith(
        "== Not allowed == /queue approve needs the approver role; bob has: viewer, operator. "
        f"Slack user group {APPROVERS} cannot be read (Slack answered HTTP 500; "
        f"last read {read_at:%H:%M:%S} UTC, over 10 min ago): nothing it grants is given."
    )
    calls = team.fake.group_calls[APPROVERS]
    await team.refused(f"/queue approve CR-{third}", SLACK_CAROL)
    assert team.fake.group_calls[APPROVERS] == calls  # asked again at most every 5 s

    team.fake.release_groups()
    team.clock.advance(seconds=5)
    assert "approved by carol and executed" in await team.ok(
        f"/queue approve CR-{third}", SLACK_CAROL
    )


async def test_a_group_never_read_grants_nothing_while_slack_fails(team: Team) -> None:
    team.fake.fail_groups("missing_scope")
    number = await team.request()
    refusal = await team.refused(f"/queue approve CR-{number}", SLACK_BOB)
    assert refusal.startswith(
        "== Not allowed == /queue approve needs the approver role; bob has: viewer, operator. "
        f"Slack user group {APPROVERS} cannot be read (Slack answered "
        "missing_scope (the app needs the usergroups:read scope); never read): nothing it "
        "grants is given."
    )
    pending = await team.ok("/queue pending", SLACK_ALICE)
    assert f"CR-{number}" in pending  # nothing was approved


async def test_a_refusal_resting_on_a_stale_read_says_it_is_stale(team: Team) -> None:
    number = await team.request()  # the group read: bob and carol
    team.fake.fail_groups()
    team.fake.usergroups[APPROVERS] = [SLACK_BOB, SLACK_CAROL, SLACK_DORA]  # dora joins
    team.clock.advance(minutes=1)
    refusal = await team.refused(f"/queue approve CR-{number}", SLACK_DORA)
    # she is refused on what Slack said a minute ago; the refusal must say that much
    assert f"Slack user group {APPROVERS} did not answer" in refusal, refusal


# the duty officer on shift by a built-in schedule: dora, then alice from 09:00 on 30 Nov
SCHEDULE = f"""
[rotas."{DUTY_ROTA}"]
schedule = {{ start = "2026-11-16T09:00:00Z", every = "7d", people = ["alice", "dora"] }}
"""


async def test_a_schedule_rota_hands_over_at_its_boundary(
    demo_db_url: str, tmp_path: Path, fake: FakeSlack
) -> None:
    fake.usergroups.update({APPROVERS: [SLACK_BOB], "S0CLIPS": [SLACK_CAROL]})
    team = await team_of(demo_db_url, tmp_path, fake, groups_config(SCHEDULE))
    try:
        boundary = START.replace(hour=9)
        team.clock.now = boundary - timedelta(seconds=1)
        declare = '/incident declare gd:queue-loss "jobs stopped" --queue {}'
        refusal = await team.refused(declare.format("workers"), SLACK_ALICE)
        assert refusal == (
            f"== Not allowed == only whoever holds {DUTY_ROTA} may declare gd:queue-loss "
            "(now: dora, until 2026-11-30 09:00 UTC, then alice); ask them, or /incident "
            f"whois {DUTY_ROTA}"
        )
        assert "led by dora" in await team.ok(declare.format("workers"), SLACK_DORA)

        team.clock.now = boundary
        refusal = await team.refused(declare.format("clips"), SLACK_DORA)
        assert "(now: alice, until 2026-12-07 09:00 UTC, then dora)" in refusal
        assert "led by alice" in await team.ok(declare.format("clips"), SLACK_ALICE)
        async with team.app.state_engine.connect() as conn:
            rows = await conn.exec_driver_sql(
                "SELECT actor_person, details FROM qb_audit_events "
                "WHERE action = 'incident.declared' ORDER BY id"
            )
            declared = [(who, json.loads(details)["basis"]) for who, details in rows]
        assert declared == [
            (
                "dora",
                [
                    {"gives": "role operator", "source": "[people.dora]"},
                    {
                        "gives": f"rota {DUTY_ROTA}",
                        "source": f"schedule of {DUTY_ROTA}, on shift until 2026-11-30 09:00 UTC",
                        "read_at": (boundary - timedelta(seconds=1)).isoformat(),
                    },
                ],
            ),
            (
                "alice",
                [
                    {"gives": "role operator", "source": "[people.alice]"},
                    {
                        "gives": f"rota {DUTY_ROTA}",
                        "source": f"schedule of {DUTY_ROTA}, on shift until 2026-12-07 09:00 UTC",
                        "read_at": boundary.isoformat(),
                    },
                ],
            ),
        ]
    finally:
        await close(team)
