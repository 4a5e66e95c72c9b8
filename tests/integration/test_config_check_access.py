"""`queuebot config check` says who may do what: each rota's source and who holds it now
(read live where the process has a reader for the platform, else why it cannot be read),
a rota nobody holds now as a warning, each role grant's and team's sources, each owned
queue's teams; approvers given by a group alone are no "nobody may approve" problem."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot import cli
from bot import config_check as check
from bot.bootstrap import App
from bot.demo import DEMO_CONFIG
from services.access import Source
from tests.conftest import templates

ACCESS = """
[rotas."operations duty officer"]
schedule = { start = "2020-01-06T09:00:00Z", every = "7d", people = ["dora"] }

[rotas."rota:later"]
schedule = { start = "2099-01-05T09:00:00+01:00", every = "7d", people = ["bob", "dora"] }

[rotas."rota:prod-ops"]
slack_usergroup = "S0PRODOPS"

[roles.approver]
slack_usergroups = ["S0APPROVE"]

[teams.billing]
people = ["alice"]
rotas = ["rota:prod-ops"]
"""
OWNED = 'profile = "message_job"\nowners = ["billing"]\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queuebot.toml"
    path.write_text(text)
    return path


def demo_with_access(tmp_path: Path) -> Path:
    text = DEMO_CONFIG.replace('profile = "message_job"\n', OWNED, 1).format(config="x")
    return write(tmp_path, text + ACCESS)


async def run_check(
    tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[int, str, str]:
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", templates().sqlite("demo", tmp_path))
    monkeypatch.setenv("QUEUEBOT_CONFIG", str(config))
    for var in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "DISCORD_BOT_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    capsys.readouterr()
    code = await cli.run(cli.parse(["config", "check"]))
    said = capsys.readouterr()
    return code, said.out, said.err


@dataclass
class SlackGroups:
    """The Slack edge a serving process attaches (a ``Reader``)."""

    groups: dict[str, frozenset[str]]

    async def members(self, source: Source) -> frozenset[str]:
        return self.groups[source.id]


async def test_without_a_token_each_source_is_named_and_said_to_be_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, out, err = await run_check(tmp_path, demo_with_access(tmp_path), monkeypatch, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert "rotas: 3" in lines
    (duty,) = [line for line in lines if line.startswith("  operations duty officer: ")]
    assert duty.startswith(
        "  operations duty officer: schedule (dora, every 1 week): dora now, until "
    )
    assert (
        "  rota:later: schedule (bob, dora, every 1 week): nobody yet: the schedule starts "
        "2099-01-05 08:00 UTC, bob first"
    ) in lines  # given at 09:00 +01:00, said in UTC
    assert (
        "  rota:prod-ops: Slack user group S0PRODOPS: cannot be read without SLACK_BOT_TOKEN"
        in lines
    )
    assert (
        "role approver also from: Slack user group S0APPROVE; now: none read (not read: Slack "
        "user group S0APPROVE cannot be read without SLACK_BOT_TOKEN)"
    ) in lines
    assert (
        "team billing: [people] alice; rota rota:prod-ops; now: alice (not read: rota "
        "rota:prod-ops: Slack user group S0PRODOPS cannot be read without SLACK_BOT_TOKEN)"
    ) in lines
    assert any(line.startswith("queue clips: owned by team billing (") for line in lines)
    assert not any(line.startswith("queue workers:") for line in lines)
    # the shipped runbooks' declaring authority is a rota now, not a [roles] name
    assert "  gd:queue-loss: declared by whoever holds rota operations duty officer" in lines
    assert (
        "warning: rota rota:later: nobody holds it now: its schedule starts 2099-01-05 08:00 "
        "UTC (first bob); until then nothing it gives is held"
    ) in lines
    assert "rota operations duty officer" not in " ".join(
        line for line in lines if line.startswith("warning:")
    )


async def test_a_reader_attached_reads_each_group_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    slack = SlackGroups({"S0PRODOPS": frozenset(), "S0APPROVE": frozenset({"U0BOB", "U0ZED"})})

    def attach(config: object, app: App) -> bool:  # the Slack edge, answering from here
        assert app.standings is not None
        app.standings.membership.add_reader("slack", slack)
        return True

    monkeypatch.setattr(check, "attach_slack_reader", attach)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    code, out, err = await run_check(tmp_path, demo_with_access(tmp_path), monkeypatch, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert "  rota:prod-ops: Slack user group S0PRODOPS: nobody now" in lines
    assert "role approver also from: Slack user group S0APPROVE; now: bob, slack:U0ZED" in lines
    assert "team billing: [people] alice; rota rota:prod-ops; now: alice" in lines
    assert (
        "warning: rota rota:prod-ops: nobody holds it now (Slack user group S0PRODOPS has no "
        "members): nothing it gives is held"
    ) in lines


async def test_approvers_from_a_group_alone_are_not_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    nobody = re.sub(r"\[people\.\w+\]\n(?:\w+ = .*\n)+\n", "", DEMO_CONFIG)
    assert "[people." not in nobody
    grant = '[roles.approver]\nslack_usergroups = ["S0APPROVE"]\n'
    config = write(tmp_path, nobody.format(config="x") + grant)
    code, out, err = await run_check(tmp_path, config, monkeypatch, capsys)
    assert "nobody has the approver role" not in err
    assert code == 0, err
    assert "people: none under [people]; roles come from groups alone (docs/access.md)" in out
    assert (
        "approvers now: none known; not all read (Slack user group S0APPROVE cannot be read "
        "without SLACK_BOT_TOKEN)"
    ) in out
