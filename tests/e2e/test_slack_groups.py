"""Roles, owners and a rota from Slack user groups, end to end: the real `queuebot serve`
on the group team's configuration (tests/helpers/groups.py: the approver role is user
group S0APPROVE, queue clips is owned by team clips-team, user group S0CLIPS, and the
operations duty officer on shift is user group S0PRODOPS), its Web API pointed at the
local fake Slack, which serves the groups' members, and Slack's signed Events API
callbacks telling it when a group changed. What each person reads, and what the audit
trail keeps of what their standing rested on."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import (
    event_callback,
    group_updated,
    members_changed,
    send_event,
    signed,
    slash_fields,
    url_verification,
)
from tests.e2e.serving import Served, demo_database, running_serve
from tests.e2e.slack_stack import texts
from tests.helpers.database import query
from tests.helpers.groups import (
    APPROVERS,
    CLIPS_TEAM,
    DUTY_ROTA,
    PROD_OPS,
    SLACK_CAROL,
    groups_config,
)
from tests.helpers.people import SLACK_ALICE, SLACK_BOB, SLACK_DORA
from tests.helpers.platforms import slack_env

AUDIT_KEY = "e2e-audit-key-0123456789abcdef0123456789"


@dataclass
class Stack:
    fake: FakeSlack
    served: Served
    db_url: str

    def sql(self, statement: str, **params: Any) -> list[Any]:
        return query(self.db_url, statement, **params)

    def say(self, text: str, user: str, *, command: str = "/queue") -> str:
        """A signed slash command; what its person reads in answer."""
        name = f"groups-{time.monotonic_ns()}"
        fields = slash_fields(self.fake, text, name=name, user=user, trigger=f"1.{name}")
        body = urlencode({**fields, "command": command})
        response = web.post(
            f"{self.served.url}/slack/events", content=body, headers=signed(body), timeout=10
        )
        assert response.status_code == 200
        answer = self.fake.wait_for(lambda c: c.path == f"/response/{name}")[0]
        return " ".join(texts(answer).split())

    def tell(self, event: dict[str, Any]) -> None:
        """Slack's callback saying a user group changed, once serve has taken it."""
        group = event.get("subteam_id") or event["subteam"]["id"]
        said = f"Slack user group {group} changed: its members are read again"
        before = self.served.log.read_text().count(said)
        response = send_event(self.served.url, event_callback(event))
        assert response.status_code == 200, response.text
        deadline = time.monotonic() + 10
        while self.served.log.read_text().count(said) == before:
            assert time.monotonic() < deadline, f"serve never logged {said!r}"
            time.sleep(0.02)

    def groups(self, members: dict[str, list[str]]) -> None:
        """The groups' members from now on, and Slack saying each changed."""
        for group, users in members.items():
            self.fake.usergroups[group] = users
            self.tell(members_changed(group))

    def request(self) -> int:
        """alice asks to requeue one failed row of workers (an unowned queue)."""
        (row,) = self.sql(
            "SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed' AND id NOT IN "
            "(SELECT CAST(job_id AS INTEGER) FROM qb_change_items)"
        )[0]
        return number_in(self.say(f'requeue {row} --queue workers --reason "fixed"', SLACK_ALICE))

    def audit(self, action: str, subject: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """The audit events of ``action`` (about ``subject``): who acted, the details."""
        rows = self.sql(
            "SELECT actor_person, subject, details FROM qb_audit_events WHERE action = :a "
            "ORDER BY id",
            a=action,
        )
        return [(who, json.loads(d)) for who, about, d in rows if subject in {None, about}]


def number_in(text: str) -> int:
    found = re.search(r"CR-(\d+)", text)
    assert found, text
    return int(found.group(1))


def jsonable(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("slack-groups")
    with demo_database(request.param, workdir) as db_url, FakeSlack().start() as fake:
        fake.usergroups.update({APPROVERS: [SLACK_BOB], CLIPS_TEAM: [], PROD_OPS: []})
        env = {**slack_env(fake), "QUEUEBOT_AUDIT_KEY": AUDIT_KEY}
        with running_serve(workdir, db_url, env, config_text=groups_config()) as served:
            yield Stack(fake, served, db_url)


def test_slack_checking_the_events_url_is_answered_with_its_challenge(stack: Stack) -> None:
    response = send_event(stack.served.url, url_verification("3eZbrw1aBm2rZgRNFdxV2595E9CY"))
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY"}


def test_a_group_member_approves_and_once_removed_is_refused_within_the_minute(
    stack: Stack,
) -> None:
    stack.groups({APPROVERS: [SLACK_BOB]})
    first = stack.request()
    approved = stack.say(f"approve CR-{first}", SLACK_BOB)  # bob: an operator under [people]
    assert f"CR-{first}: requeue 1 row(s) in queue workers - approved by bob and executed" in (
        approved
    )
    (basis,) = [d["basis"] for _, d in stack.audit("change.approved", f"CR-{first}")]
    assert {"gives": "role approver", "source": f"Slack user group {APPROVERS}"} == {
        k: v for k, v in basis["grounds"][1].items() if k != "read_at"
    }

    second = stack.request()
    stack.fake.usergroups[APPROVERS] = [SLACK_CAROL]  # bob leaves the group
    stack.tell(members_changed(APPROVERS, added=(SLACK_CAROL,), removed=(SLACK_BOB,)))
    refused = stack.say(f"approve CR-{second}", SLACK_BOB)
    assert "/queue approve needs the approver role; bob has: viewer, operator." in refused

    stack.fake.usergroups[APPROVERS] = [SLACK_BOB, SLACK_CAROL]  # and is back
    stack.tell(group_updated(APPROVERS, (SLACK_BOB, SLACK_CAROL)))
    assert "approved by bob and executed" in stack.say(f"approve CR-{second}", SLACK_BOB)


def test_with_slack_failing_a_recent_read_is_used_and_said_to_be_stale(stack: Stack) -> None:
    stack.groups({APPROVERS: [SLACK_BOB]})
    number = stack.request()
    stack.fake.fail_groups()
    try:
        stack.tell(members_changed(APPROVERS))  # read again: Slack answers 500
        approved = stack.say(f"approve CR-{number}", SLACK_BOB)
    finally:
        stack.fake.release_groups()
    assert "approved by bob and executed" in approved
    note = re.search(
        rf"Note: Slack user group {APPROVERS} did not answer \(Slack answered "
        r"HTTP 500\): its members as read at (\d\d:\d\d:\d\d) UTC are used, for at most 10 "
        r"minutes after that read\.",
        approved,
    )
    assert note, approved
    (basis,) = [d["basis"] for _, d in stack.audit("change.approved", f"CR-{number}")]
    (grounds,) = [g for g in basis["grounds"] if g["gives"] == "role approver"]
    assert grounds["stale"] is True and grounds["read_at"][11:19] == note.group(1)


def test_an_owned_queue_needs_an_owners_approval_and_the_owner_is_named(stack: Stack) -> None:
    stack.groups({APPROVERS: [SLACK_BOB, SLACK_CAROL], CLIPS_TEAM: [SLACK_CAROL]})
    (job,) = stack.sql(
        "SELECT job_id FROM queue_messages WHERE status = 'DLQ' AND last_error LIKE "
        "'ffmpeg exited%' ORDER BY available_at LIMIT 1"
    )[0]
    asked = stack.say(f'redrive {job} --queue clips --reason "transcoder fixed"', SLACK_ALICE)
    number = number_in(asked)
    assert (
        "Queue clips is owned by team clips-team: one approval must come from an owner (carol)."
        in asked
    )

    refused = stack.say(f"approve CR-{number}", SLACK_BOB)
    assert (
        f"CR-{number} changes queue clips, which team clips-team owns: one approval must come "
        "from an owner (carol), and yours would complete it without one. Your approval was "
        "not recorded; ask an owner to approve." in refused
    )
    assert "approved by carol and executed" in stack.say(f"approve CR-{number}", SLACK_CAROL)

    (who, details), *more = stack.audit("change.approved", f"CR-{number}")
    assert who == "carol" and not more
    grounds = [{k: v for k, v in g.items() if k != "read_at"} for g in details["basis"]["grounds"]]
    assert grounds == [
        {"gives": "role operator", "source": "[people.carol]"},
        {"gives": "role approver", "source": f"Slack user group {APPROVERS}"},
        {"gives": "team clips-team", "source": f"Slack user group {CLIPS_TEAM}"},
    ]
    assert all("read_at" in g for g in details["basis"]["grounds"][1:])
    assert details["basis"]["owner_of"] == ["clips-team"]
    rows = stack.sql("SELECT person, basis FROM qb_approvals WHERE request_id = :n", n=number)
    assert [(person, jsonable(basis)["owner_of"]) for person, basis in rows] == [
        ("carol", ["clips-team"])
    ]


def test_who_is_in_the_rota_s_group_may_declare_and_others_are_told_who(stack: Stack) -> None:
    stack.groups({PROD_OPS: [SLACK_DORA]})
    declare = 'declare gd:queue-loss "jobs stopped" --queue workers'
    refused = stack.say(declare, SLACK_ALICE, command="/incident")
    assert (
        f"only whoever holds {DUTY_ROTA} may declare gd:queue-loss (now: dora); ask them, or "
        f"/incident whois {DUTY_ROTA}" in refused
    )
    declared = stack.say(declare, SLACK_DORA, command="/incident")
    assert "declared (gd:queue-loss), led by dora" in declared
    ((who, details),) = stack.audit("incident.declared")
    assert who == "dora"
    (grounds,) = [g for g in details["basis"] if g["gives"] == f"rota {DUTY_ROTA}"]
    assert grounds["source"] == f"Slack user group {PROD_OPS} (rota {DUTY_ROTA})"
    assert "read_at" in grounds
