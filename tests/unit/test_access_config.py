"""[rotas], [roles.ROLE] and [teams.NAME] as queuebot.toml holds them (docs/access.md): a
good file loads with each source; a name that points nowhere (a rota, a team, a person), a
rota with no source or two, a schedule without its time zone and a table granting no role
are refused when the file is loaded, naming the file, the key and the fix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.config import load_config
from services.errors import ConfigError

PEOPLE = '[people.alice]\nslack = "U0ALICE"\n[people.bob]\nslack = "U0BOB"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queuebot.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refused(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: "), message  # one line naming the file
    assert "\n" not in message
    return message


def test_each_source_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        PEOPLE
        + '[rotas."rota:prod-ops"]\nslack_usergroup = "S0123ABCD"\n'
        + '[rotas."rota:db"]\ndiscord_role = "400000000000000001"\n'
        + '[rotas."operations duty officer"]\nschedule = { start = "2026-12-07T10:00:00+01:00",'
        + ' every = "7d", people = ["alice", "bob"] }\n'
        + '[roles]\n"service on-call" = "operator"\n'
        + '[roles.approver]\npeople = ["alice"]\nslack_usergroups = ["S0APPROVE"]\n'
        + 'discord_roles = ["400000000000000002"]\nrotas = ["ROTA:PROD-OPS"]\n'
        + '[teams.billing]\nslack_usergroups = ["S0BILLING"]\n'
        + '[queues.payments]\nprofile = "worker_queue"\nowners = ["billing"]\n',
    )
    file = load_config(path, environ={}).file
    schedule = file.rotas["operations duty officer"].schedule
    assert schedule is not None
    assert schedule.start == datetime(2026, 12, 7, 9, tzinfo=UTC)
    assert schedule.every == timedelta(days=7)
    assert file.authority_roles() == {"service on-call": "operator"}
    assert file.role_grants()["approver"].rotas == ["ROTA:PROD-OPS"]  # case does not count
    assert file.queue_map()["payments"].owners == ["billing"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[teams.billing]\nrotas = ["rota:nope"]\n',
            "teams.billing.rotas: 'rota:nope' is not under [rotas] (known: none yet)",
        ),
        (
            '[rotas."rota:a"]\nslack_usergroup = "S0AAA"\n[roles.approver]\nrotas = ["rota:b"]\n',
            "roles.approver.rotas: 'rota:b' is not under [rotas] (known: rota:a)",
        ),
        (
            '[queues.clips]\nprofile = "message_job"\nowners = ["billing"]\n',
            "queues.clips.owners: team 'billing' is not under [teams] (known: none yet); add "
            "[teams.billing] with its people, slack_usergroups, discord_roles or rotas",
        ),
        (
            '[teams.billing]\npeople = ["zed"]\n',
            "teams.billing.people: 'zed' is not under [people]; add [people.zed] with their "
            "slack or discord id",
        ),
        (
            '[roles.operator]\npeople = ["zed"]\n',
            "roles.operator.people: 'zed' is not under [people]",
        ),
        (
            '[rotas."rota:a"]\nschedule = { start = "2026-12-07T09:00:00Z", every = "7d", '
            'people = ["alice", "zed"] }\n',
            "rotas.rota:a.schedule.people: 'zed' is not under [people]; add [people.zed]",
        ),
    ],
    ids=[
        "rota of a team",
        "rota of a role",
        "team of a queue",
        "person of a team",
        "person of a role",
        "person of a schedule",
    ],
)
def test_a_name_that_points_nowhere_is_refused(tmp_path: Path, text: str, said: str) -> None:
    assert said in refused(tmp_path, PEOPLE + text)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[rotas."rota:a"]\n', "rotas.rota:a: give exactly one source of who holds the rota"),
        (
            '[rotas."rota:a"]\nslack_usergroup = "S0AAA"\ndiscord_role = "400000000000000001"\n',
            "this one gives slack_usergroup and discord_role",
        ),
        (
            '[rotas."rota:a"]\nschedule = { start = "2026-12-07T09:00:00", every = "7d", '
            'people = ["alice"] }\n',
            "rotas.rota:a.schedule.start = '2026-12-07T09:00:00': give the time with its zone",
        ),
        (
            '[rotas."rota:a"]\nschedule = { start = "2026-12-07T09:00:00Z", every = "7 days", '
            'people = ["alice"] }\n',
            "rotas.rota:a.schedule.every = '7 days': expected a number and h, d or w, such as "
            '"7d" (a week) or "12h"',
        ),
        (
            '[roles.admin]\npeople = ["alice"]\n',
            "roles.admin: a table under [roles] grants a queuebot role, one of viewer, operator, "
            "approver, duty-officer",
        ),
        (
            "[teams.billing]\n",
            "teams.billing: name at least one of people, slack_usergroups, discord_roles or rotas",
        ),
        (
            '[rotas."rota:a"]\nslack_usergroup = "U0ALICE"\n',
            "rotas.rota:a.slack_usergroup = 'U0ALICE': expected a Slack user group id",
        ),
    ],
    ids=[
        "no source",
        "two sources",
        "no zone",
        "bad period",
        "not a role",
        "empty team",
        "a user id for a group",
    ],
)
def test_a_rota_or_grant_that_cannot_work_is_refused(tmp_path: Path, text: str, said: str) -> None:
    assert said in refused(tmp_path, PEOPLE + text)
