"""Forms on Discord end to end: the real `queuebot serve` against the fake Discord. A
command missing what a form asks is answered with a modal as its first response (built
with discord.py's own components, checked by the fake against Discord's limits); the
modal submitted is run as the command, or answered with what is wrong and a button that
opens the form again holding what was typed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.fake_discord import EPHEMERAL, FakeDiscord, Interaction
from testkit.fake_slack import FakeSlack
from tests.e2e.serving import Served, demo_database
from tests.e2e.test_discord import CHANNEL, answered, serving
from tests.helpers.database import query
from tests.helpers.people import DISCORD_ALICE, DISCORD_BOB, DISCORD_DORA


class Stack:
    def __init__(self, fake: FakeDiscord, served: Served, db_url: str, workdir: Path) -> None:
        self.fake, self.served, self.db_url, self.workdir = fake, served, db_url, workdir

    def sql(self, statement: str, **params: Any) -> list[Any]:
        return query(self.db_url, statement, **params)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("discord-forms")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        FakeSlack().start() as slack,
        serving(fake, slack, workdir, db_url) as served,
    ):
        yield Stack(fake, served, db_url, workdir)


def modal(stack: Stack, i: Interaction) -> dict[str, Any]:
    stack.fake.wait_until(lambda: bool(i.callbacks))
    assert i.callbacks[0]["type"] == 9, i.callbacks  # the modal is the first response
    return dict(i.callbacks[0]["data"])


def fields(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each field of a modal by its custom_id, with its label."""
    return {
        c["component"]["custom_id"]: {**c["component"], "label": c["label"]}
        for c in data["components"]
    }


def requests_count(stack: Stack) -> int:
    return int(stack.sql("SELECT count(*) FROM qb_change_requests")[0][0])


def test_a_redrive_without_its_reason_opens_a_modal_and_a_wrong_value_is_said(
    stack: Stack,
) -> None:
    before = requests_count(stack)
    opened = stack.fake.command(
        "queue", "redrive", {"error-like": "ffmpeg", "sample": 2}, user=DISCORD_ALICE
    )
    data = modal(stack, opened)
    assert data["custom_id"] == "qbform:redrive:0"
    shown = fields(data)
    assert shown["selection"]["value"] == "--error-like ffmpeg --sample 2"
    assert shown["reason"]["style"] == 2 and shown["reason"]["required"]
    assert opened.answered_within() is not None and opened.answered_within() < 3.0

    wrong = stack.fake.submit(
        opened, {"reason": "OOM fix deployed", "evidence": "the dashboard"}, user=DISCORD_ALICE
    )
    stack.fake.wait_until(lambda: bool(wrong.callbacks))
    said = wrong.callbacks[0]
    assert said["type"] == 4 and said["data"]["flags"] & EPHEMERAL
    assert "Evidence (a link): a link starting with https://" in said["data"]["content"]
    (again,) = [
        c for row in said["data"]["components"] for c in row["components"] if c["type"] == 2
    ]
    assert again["label"] == "Open the form again"
    assert requests_count(stack) == before

    # the button opens the form again, holding what was typed
    message = wrong.original
    assert message is not None
    reopened = stack.fake.click(again["custom_id"], message_id=message.id, user=DISCORD_ALICE)
    shown = fields(modal(stack, reopened))
    assert shown["reason"]["value"] == "OOM fix deployed"
    assert shown["evidence"]["value"] == "the dashboard"

    right = stack.fake.submit(
        reopened, {"evidence": "https://deploys.example/4411"}, user=DISCORD_ALICE
    )
    text = answered(stack.fake, right)
    assert right.callbacks[0]["type"] == 5  # written down, then deferred
    assert "staged redrive of 14 dead letter(s) in queue clips" in text
    assert requests_count(stack) == before + 1
    (reason, evidence) = stack.sql(
        "SELECT reason, evidence FROM qb_change_requests ORDER BY id DESC LIMIT 1"
    )[0]
    assert (reason, evidence) == ("OOM fix deployed", "https://deploys.example/4411")
    key = f"discord:interaction:{right.id}"
    assert stack.sql("SELECT state FROM qb_deliveries WHERE key = :k", k=key) == [("done",)]


def test_a_rejection_by_modal_and_one_decided_meanwhile(stack: Stack) -> None:
    ids = [
        str(i)
        for (i,) in stack.sql(
            "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' ORDER BY id LIMIT 1"
        )
    ]
    asked = stack.fake.command(
        "queue",
        "requeue",
        {"ids": ids[0], "queue": "workers", "reason": "retry it"},
        user=DISCORD_ALICE,
    )
    number = answered(stack.fake, asked).split("CR-", 1)[1].split(":")[0].split()[0]
    opened = stack.fake.command("queue", "reject", {"request": f"CR-{number}"}, user=DISCORD_BOB)
    assert modal(stack, opened)["title"] == f"Reject CR-{number}"
    withdrawn = stack.fake.command(
        "queue", "reject", {"request": f"CR-{number}", "reason": "not needed"}, user=DISCORD_ALICE
    )
    assert "withdrawn by alice" in answered(stack.fake, withdrawn)
    late = stack.fake.submit(opened, {"reason": "wrong tenant"}, user=DISCORD_BOB)
    assert "Already decided" in answered(stack.fake, late)


def test_a_message_context_menu_declares_an_incident_by_form(stack: Stack) -> None:
    message = stack.fake.posted_earlier(CHANNEL, "exports stuck since 02:10, tenants call", [])
    opened = stack.fake.message_command("Declare incident", message, user=DISCORD_DORA)
    shown = fields(modal(stack, opened))
    assert shown["summary"]["value"] == "exports stuck since 02:10, tenants call"
    assert "gd:queue-loss" in [o["value"] for o in shown["scenario"]["options"]]
    right = stack.fake.submit(
        opened, {"scenario": "gd:queue-loss", "queue": "clips"}, user=DISCORD_DORA
    )
    assert "declared (gd:queue-loss), led by dora" in answered(stack.fake, right)


def test_a_person_who_may_not_declare_is_refused_not_given_a_form(stack: Stack) -> None:
    message = stack.fake.posted_earlier(CHANNEL, "something is off", [])
    refused = stack.fake.message_command("Declare incident", message, user=DISCORD_ALICE)
    stack.fake.wait_until(lambda: bool(refused.callbacks))
    said = refused.callbacks[0]
    assert said["type"] == 4 and said["data"]["flags"] & EPHEMERAL
    assert "declaration authority of no runbook" in said["data"]["content"]


def test_a_form_discord_no_longer_takes_is_answered_in_words(stack: Stack) -> None:
    quiet = "200000000000000009"
    before = {m.id for m in stack.fake.channel_messages(quiet)}
    stale = stack.fake.command(
        "queue", "resume", {"plan": "P-3"}, user=DISCORD_ALICE, channel=quiet, stale=True
    )

    def words() -> list[str]:
        return [
            m.content
            for m in stack.fake.channel_messages(quiet)
            if m.id not in before and f"<@{DISCORD_ALICE}>" in m.content
        ]

    stack.fake.wait_until(lambda: bool(words()))
    assert "could not open in time" in words()[0]
    assert stale.callbacks == []


@pytest.mark.parametrize(
    ("group", "sub", "options", "title", "named"),
    [
        ("queue", "resume", {"plan": "P-99"}, "Resume P-99", "P-99"),
        ("queue", "rollback", {"plan": "P-99"}, "Roll back P-99", "P-99"),
        (
            "incident",
            "resolve",
            {"incident": "INC-99", "override": True},
            "Resolve INC-99",
            "INC-99",
        ),
    ],
)
def test_a_reason_modal_says_a_wrong_reason_then_runs_the_command(
    stack: Stack, group: str, sub: str, options: dict[str, Any], title: str, named: str
) -> None:
    opened = stack.fake.command(group, sub, options, user=DISCORD_DORA)
    assert modal(stack, opened)["title"] == title
    wrong = stack.fake.submit(opened, {"reason": "no"}, user=DISCORD_DORA)
    stack.fake.wait_until(lambda: bool(wrong.callbacks))
    assert (
        "- Reason: String should have at least 3 characters"
        in wrong.callbacks[0]["data"]["content"]
    )
    right = stack.fake.submit(opened, {"reason": "second fix deployed"}, user=DISCORD_DORA)
    assert named in answered(stack.fake, right)  # the command's own answer


def test_a_declaration_without_its_summary_opens_the_form(stack: Stack) -> None:
    opened = stack.fake.command("incident", "declare", {}, user=DISCORD_DORA)
    shown = fields(modal(stack, opened))
    assert set(shown) == {"scenario", "summary", "queue"}
    assert shown["summary"]["required"] and "value" not in shown["summary"]
    assert {"clips", "workers"} <= {o["value"] for o in shown["queue"]["options"]}
