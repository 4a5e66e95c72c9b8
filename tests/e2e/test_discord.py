"""Discord end to end: the real `queuebot serve` process with DISCORD_BOT_TOKEN set, its
REST base and gateway pointed at a local fake Discord (testkit/fake_discord.py) that
speaks gateway v10 JSON and injects INTERACTION_CREATE as the gateway delivers it. The
tests read what the fake received: interaction callbacks, follow-ups, channel messages."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from testkit import web
from testkit.fake_discord import DEFAULT_TOKEN, EPHEMERAL, FakeDiscord, Interaction, StoredMessage
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import signed, slash_fields
from tests.e2e.serving import ALERT_AUTH, Served, demo_database, running_serve
from tests.e2e.test_console import queuebot
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.database import query
from tests.helpers.people import DISCORD_ALICE, DISCORD_BOB, DISCORD_DORA
from tests.helpers.platforms import discord_env, slack_env
from tests.integration.test_incident_timers import drill_runbook

CHANNEL = "200000000000000001"  # [channels.alerts] in the demo config
OPERATORS = "200000000000000009"  # the operators' audience, here
GUILD = "400000000000000001"
DRILL = "gd:drill-discord"
EXTRA = (
    f"""
[discord]
guild = "{GUILD}"

[channels.ops-discord]
discord = "{OPERATORS}"

[incidents.audiences]
operators = ["ops-discord"]

[runbooks]
dir = "runbooks"
"""
    # only the alerts a test sends: the demo's failed jobs would fire detectors
    + DETECTORS_OFF
)


@dataclass
class Stack:
    fake: FakeDiscord
    slack: FakeSlack
    served: Served
    db_url: str
    workdir: Path

    def sql(self, statement: str, **params: Any) -> list[Any]:
        return query(self.db_url, statement, **params)


AUDIT_KEY = "e2e-audit-key-0123456789abcdef0123456789"


def _env(fake: FakeDiscord, slack: FakeSlack, token: str = DEFAULT_TOKEN) -> dict[str, str]:
    return {
        **discord_env(fake, token=token),
        # Slack too, in the same process: one person on two platforms
        **slack_env(slack),
        "QUEUEBOT_AUDIT_KEY": AUDIT_KEY,
    }


@contextlib.contextmanager
def serving(
    fake: FakeDiscord, slack: FakeSlack, workdir: Path, db_url: str, *, extra: str = EXTRA
) -> Iterator[Served]:
    before = fake.identified
    with_drill(workdir)
    with running_serve(workdir, db_url, _env(fake, slack), extra=extra) as served:
        fake.wait_until(lambda: fake.identified > before and fake.connected() > 0)
        wait_ready(served)
        yield served


def with_drill(workdir: Path) -> None:
    """The runbooks folder EXTRA names, holding a drill of the queue-loss runbook whose
    deadlines come within 8 s: its reminders at half and at 80% are 2.4 s apart, so a
    loaded machine's late tick still sends both (at 3 s they were 0.9 s apart, and one
    tick late enough sent only the later one)."""
    drill_runbook(workdir / "runbooks", DRILL, operators_ms=8000, actors_ms=8000)


def wait_ready(served: Served) -> None:
    for _ in range(300):
        body = web.get(f"{served.url}/readyz", timeout=5).json()
        if body.get("discord") == "ok":
            return
        time.sleep(0.05)
    raise AssertionError(f"Discord never became ready: {body}")


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("discord")
    with (
        demo_database(request.param, workdir) as db_url,
        FakeDiscord().start() as fake,
        FakeSlack().start() as slack,
        serving(fake, slack, workdir, db_url) as served,
    ):
        yield Stack(fake, slack, served, db_url, workdir)


def answered(fake: FakeDiscord, i: Interaction, *, timeout: float = 15.0) -> str:
    """Wait for the interaction's answer (the deferred response edited, or a follow-up)
    and return what the person reads."""

    def done() -> bool:
        return bool(i.followups) or (i.original is not None and i.original.edits > 0)

    try:
        fake.wait_until(done, timeout)
    except AssertionError:
        raise AssertionError(
            [(c.method, c.path, c.status, c.body) for c in fake.calls[-5:]]
        ) from None
    return "\n".join(m.text() for m in i.replies() if m.edits or m in i.followups)


def failed_ids(stack: Stack, reason: str) -> list[str]:
    return [
        str(i)
        for (i,) in stack.sql(
            "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' AND failure_reason = "
            ":reason ORDER BY id",
            reason=reason,
        )
    ]


def request_change(stack: Stack, reason: str) -> tuple[StoredMessage, int, list[str]]:
    """alice asks, from Discord, to requeue the failed rows of one failure reason: the
    request's message (for everyone, with its buttons) and its number."""
    ids = failed_ids(stack, reason)
    assert ids
    i = stack.fake.command(
        "queue",
        "requeue",
        {"ids": ", ".join(ids), "queue": "workers", "reason": f"{reason} fixed in v2"},
        user=DISCORD_ALICE,
    )
    text = answered(stack.fake, i)
    assert i.callbacks[0]["type"] == 5
    assert not i.callbacks[0].get("data", {}).get("flags", 0) & EPHEMERAL  # all see it
    message = i.replies()[0]
    assert not message.flags & EPHEMERAL
    approve = next(c for c in message.custom_ids if c.startswith("cr:approve:"))
    number = int(approve.rsplit(":", 1)[1])
    assert f"cr:reject:{number}" in message.custom_ids
    assert f"CR-{number}" in text
    return message, number, ids


def click_answer(stack: Stack, custom_id: str, message: StoredMessage, user: str) -> Interaction:
    """A click, once the bot answered it: the clicked message edited, or a follow-up."""
    edits = message.edits
    i = stack.fake.click(custom_id, message_id=message.id, user=user)
    stack.fake.wait_until(lambda: bool(i.followups) or message.edits > edits)
    return i


def executions(stack: Stack, number: int) -> int:
    rows = stack.sql(
        "SELECT count(*) FROM qb_audit_events WHERE action = 'change.executed' AND subject = :s",
        s=f"CR-{number}",
    )
    return int(rows[0][0])


def slack_slash(stack: Stack, text: str, *, user: str) -> str:
    """A signed /queue command from Slack into the same serve; what Slack's user reads."""
    name = f"slack-{time.monotonic_ns()}"
    body = urlencode(slash_fields(stack.slack, text, name=name, user=user, trigger=f"1.{name}"))
    response = web.post(
        f"{stack.served.url}/slack/events", content=body, headers=signed(body), timeout=10
    )
    assert response.status_code == 200
    calls = stack.slack.wait_for(lambda c: c.path == f"/response/{name}")
    return json.dumps(calls[0].body)


def test_commands_are_synced_to_the_guild_with_typed_options(stack: Stack) -> None:
    registered = {c["name"]: c for c in stack.fake.commands[GUILD]}
    assert set(registered) == {"queue", "incident", "Declare incident"}
    assert registered["Declare incident"]["type"] == 3  # on a message's menu
    subs = {o["name"]: o for o in registered["queue"]["options"]}
    requeue = {o["name"]: o for o in subs["requeue"]["options"]}
    assert requeue["ids"]["type"] == 3 and requeue["ids"]["required"]
    assert requeue["reason"]["required"]
    dlq = {o["name"]: o for o in subs["dlq"]["options"]}
    assert dlq["limit"]["type"] == 4 and dlq["limit"]["max_value"] == 200
    assert "timeout" in [c["value"] for c in dlq["failure-reason"]["choices"]]
    incident = {o["name"]: o for o in registered["incident"]["options"]}
    notify = {o["name"]: o for o in incident["notify"]["options"]}
    assert "operators" in [c["value"] for c in notify["audience"]["choices"]]


def test_triage_is_deferred_at_once_then_answered(stack: Stack) -> None:
    i = stack.fake.command("queue", "triage", {"queue": "workers"}, user=DISCORD_ALICE)
    text = answered(stack.fake, i)
    assert i.callbacks[0]["type"] == 5  # deferred within the 3 s
    assert i.callbacks[0]["data"]["flags"] & 64  # a read is only for whoever asked
    took = i.answered_within()
    assert took is not None and took < 3.0
    assert "workers" in text and "failed" in text


def test_a_change_is_approved_by_another_person_never_by_its_requester(stack: Stack) -> None:
    message, number, ids = request_change(stack, "spawn_ram")
    approve = f"cr:approve:{number}"

    own = click_answer(stack, approve, message, DISCORD_ALICE)
    assert own.callbacks[0]["type"] == 6  # a deferred update: the buttons stay for others
    refusal = own.followups[0]
    assert refusal.flags & EPHEMERAL
    assert f"you requested CR-{number}" in refusal.text()
    # alice is one person on every platform: Slack and the console refuse her too
    said = slack_slash(stack, f"approve CR-{number}", user="U0ALICE")
    assert f"you requested CR-{number}" in said
    console = queuebot(
        "console",
        "--as",
        "alice",
        stdin=f"/queue approve CR-{number}\n",
        cwd=stack.workdir,
        env={
            "QUEUEBOT_CONFIG": str(stack.workdir / "queuebot.toml"),
            "QUEUEBOT_DATABASE_URL": stack.db_url,
            "QUEUEBOT_AUDIT_KEY": AUDIT_KEY,
        },
    )
    assert f"you requested CR-{number}" in console.stdout, console.stdout + console.stderr
    assert executions(stack, number) == 0

    ok = click_answer(stack, approve, message, DISCORD_BOB)
    assert ok.callbacks[0]["type"] == 6
    stack.fake.wait_until(lambda: "approved by bob" in message.text())
    assert "executed" in message.text()
    assert message.custom_ids == []  # the outcome replaces the buttons
    assert executions(stack, number) == 1
    statuses = stack.sql(
        f"SELECT DISTINCT status FROM dev_r_worker_queue WHERE id IN ({', '.join(ids)})"
    )
    assert statuses == [("queued",)]


def test_a_long_answer_is_attached_whole_not_cut_or_refused(stack: Stack) -> None:
    i = stack.fake.command("queue", "dlq", {"queue": "clips", "limit": 200}, user=DISCORD_ALICE)
    answered(stack.fake, i)
    message = i.replies()[0]
    # the fake refuses (fails the test on) anything over Discord's limits
    assert len(message.content) <= 2000
    assert message.attachments == ["answer.txt"]
    assert "the full answer is attached" in message.content
    sent = [c for c in stack.fake.rest("PATCH", "/messages/@original") if c.files]
    assert len(sent[-1].files["answer.txt"]) > 2000


def test_an_unknown_command_and_an_unknown_button_are_answered_then_commands_work(
    stack: Stack,
) -> None:
    unknown = stack.fake.command("ping", "now", user=DISCORD_ALICE)
    stack.fake.wait_until(lambda: bool(unknown.callbacks))
    assert unknown.callbacks[0]["data"]["flags"] & EPHEMERAL
    assert "no command /ping" in unknown.callbacks[0]["data"]["content"]

    sub = stack.fake.command("queue", "frobnicate", user=DISCORD_ALICE)
    stack.fake.wait_until(lambda: bool(sub.callbacks))
    assert "no command /queue frobnicate" in sub.callbacks[0]["data"]["content"]

    # a change is answered for everyone, so its "thinking…" is public; a refusal is not
    refused = stack.fake.command(
        "queue", "requeue", {"ids": "1", "reason": "no", "queue": "workers"}, user=DISCORD_ALICE
    )
    stack.fake.wait_until(lambda: bool(refused.followups))
    assert not refused.callbacks[0].get("data", {}).get("flags", 0) & EPHEMERAL
    assert [m.flags & EPHEMERAL for m in refused.followups] == [EPHEMERAL]
    assert "reason: String should have at least 3 characters" in refused.followups[0].text()
    assert refused.original is None and len(refused.deleted) == 1

    strange = ["zz:unknown:1", "cr:approve:0", "q:explode:workers"]
    message = stack.fake.posted_earlier(CHANNEL, "buttons of an older queuebot", strange)
    for custom_id in strange:
        click = stack.fake.click(custom_id, message_id=message.id, user=DISCORD_BOB)
        stack.fake.wait_until(lambda c=click: bool(c.callbacks))  # type: ignore[misc]
        said = click.callbacks[0]["data"]
        assert said["flags"] & EPHEMERAL
        assert "nothing was done" in said["content"]
    assert message.edits == 0

    later = stack.fake.command("queue", "pending", user=DISCORD_BOB)
    assert "waiting for approval" in answered(stack.fake, later)


def test_a_stale_interaction_is_answered_in_the_channel_then_commands_work(
    stack: Stack,
) -> None:
    quiet = OPERATORS  # a channel the alerts of these tests do not post to
    before = {m.id for m in stack.fake.channel_messages(quiet)}
    stale = stack.fake.command(
        "queue", "triage", {"queue": "workers"}, user=DISCORD_ALICE, channel=quiet, stale=True
    )

    def notes() -> list[StoredMessage]:
        return [
            m
            for m in stack.fake.channel_messages(quiet)
            if m.id not in before and f"<@{DISCORD_ALICE}>" in m.content
        ]

    stack.fake.wait_until(lambda: bool(notes()))
    (note,) = notes()
    assert "ask again" in note.content
    assert "failed" not in note.content  # a private answer is not shown to the channel
    # queuebot's own mention pings that person, and only them
    (sent,) = [
        c
        for c in stack.fake.rest("POST", f"/channels/{quiet}/messages")
        if f"<@{DISCORD_ALICE}>" in str(c.body.get("content"))
    ]
    allowed = sent.body["allowed_mentions"]
    assert (allowed["parse"], [str(u) for u in allowed["users"]]) == ([], [DISCORD_ALICE]), allowed
    assert stale.followups == []
    later = stack.fake.command("queue", "triage", {"queue": "workers"}, user=DISCORD_ALICE)
    assert "workers" in answered(stack.fake, later)


def test_an_answer_ready_after_the_token_died_goes_to_the_channel_then_commands_work(
    stack: Stack,
) -> None:
    """Discord took the defer, but the token died before the answer was ready (as 15
    minutes on): editing the response is refused, so the answer is posted in the channel,
    mentioning whoever asked; a private one is not shown there, they are told to ask again."""
    quiet = OPERATORS  # a channel the alerts of these tests do not post to
    before = {m.id for m in stack.fake.channel_messages(quiet)}

    def said_to_alice() -> list[StoredMessage]:
        return [
            m
            for m in stack.fake.channel_messages(quiet)
            if m.id not in before and f"<@{DISCORD_ALICE}>" in m.content
        ]

    def refused_only(i: Interaction) -> None:
        """Deferred, then every answer on the token refused: nothing reached the person
        through the interaction, "thinking…" is all it shows."""
        assert [c["type"] for c in i.callbacks] == [5]
        sent = stack.fake.webhook_calls(i)
        assert ("PATCH", 401) in [(c.method, c.status) for c in sent]
        assert {c.status for c in sent} == {401}
        assert i.followups == []
        assert i.original is not None and i.original.edits == 0

    shared = stack.fake.command(
        "queue",
        "triage",
        {"queue": "workers", "share": True},
        user=DISCORD_ALICE,
        channel=quiet,
        expires_after_callback=True,
    )
    stack.fake.wait_until(lambda: bool(said_to_alice()))
    (public,) = said_to_alice()
    refused_only(shared)
    assert not shared.callbacks[0].get("data", {}).get("flags", 0) & EPHEMERAL  # for everyone
    assert "workers" in public.text() and "failed" in public.text()
    assert "ask again" not in public.text()
    before.add(public.id)

    private = stack.fake.command(
        "queue",
        "triage",
        {"queue": "workers"},
        user=DISCORD_ALICE,
        channel=quiet,
        expires_after_callback=True,
    )
    stack.fake.wait_until(lambda: bool(said_to_alice()))
    (note,) = said_to_alice()
    refused_only(private)
    assert private.callbacks[0]["data"]["flags"] & EPHEMERAL
    assert "ask again" in note.content
    assert "failed" not in note.text()  # a private answer is not shown to the channel

    later = stack.fake.command(
        "queue", "triage", {"queue": "workers"}, user=DISCORD_ALICE, channel=quiet
    )
    assert "failed" in answered(stack.fake, later)
    assert {c.status for c in stack.fake.webhook_calls(later)} == {200}


def test_a_click_from_before_a_restart_acts_once_when_clicked_twice(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("discord-restart")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        FakeSlack().start() as slack,
    ):
        with serving(fake, slack, workdir, db_url) as served:
            stack = Stack(fake, slack, served, db_url, workdir)
            message, number, ids = request_change(stack, "spawn_oom")
        # a new process: no view of that message is remembered, only the templates
        with serving(fake, slack, workdir, db_url) as served:
            stack = Stack(fake, slack, served, db_url, workdir)
            approve = f"cr:approve:{number}"
            first = fake.click(approve, message_id=message.id, user=DISCORD_BOB)
            second = fake.click(approve, message_id=message.id, user=DISCORD_BOB)
            fake.wait_until(lambda: bool(first.callbacks and second.callbacks))
            assert [i.callbacks[0]["type"] for i in (first, second)] == [6, 6]
            fake.wait_until(lambda: "approved by bob" in message.text())
            fake.wait_until(lambda: bool(first.followups or second.followups))
            assert executions(stack, number) == 1
            other = (first.followups or second.followups)[0]
            assert other.flags & EPHEMERAL
            assert f"CR-{number}" in other.text()
            statuses = stack.sql(
                f"SELECT DISTINCT status FROM dev_r_worker_queue WHERE id IN ({', '.join(ids)})"
            )
            assert statuses == [("queued",)]


def test_a_rejected_token_is_one_clear_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("discord-token")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        FakeSlack().start() as slack,
        running_serve(workdir, db_url, _env(fake, slack, token="not-the-token")) as served,
    ):
        served.wait_for_log("Discord off: Discord rejected DISCORD_BOT_TOKEN")
        body = web.get(f"{served.url}/readyz", timeout=5).json()
        assert body["status"] == "not ready"
        assert "rejected DISCORD_BOT_TOKEN" in body["discord"]
        time.sleep(1)
        assert served.log.read_text().count("DISCORD_BOT_TOKEN") == 1
        assert len(fake.rest("GET", "/users/@me")) == 1  # asked once, not in a loop


FAILED_JOBS = {
    "receiver": "queuebot",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "FailedJobsAccumulating", "queue": "workers"},
            "annotations": {"summary": "failed jobs accumulate in workers"},
            "startsAt": "2026-11-30T19:55:06Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus/graph",
            "fingerprint": "d1sc0rd0000000001",
        }
    ],
    "groupLabels": {"alertname": "FailedJobsAccumulating", "queue": "workers"},
    "commonLabels": {"alertname": "FailedJobsAccumulating", "queue": "workers"},
    "commonAnnotations": {"summary": "failed jobs accumulate in workers"},
    "externalURL": "http://alertmanager",
    "version": "4",
    "groupKey": '{}:{alertname="FailedJobsAccumulating", queue="workers"}',
    "truncatedAlerts": 0,
}


def alertmanager(stack: Stack, status: str) -> None:
    payload = json.loads(json.dumps(FAILED_JOBS))
    payload["status"] = payload["alerts"][0]["status"] = status
    if status == "resolved":
        payload["alerts"][0]["endsAt"] = "2026-11-30T20:05:06Z"
    sent = web.post(
        f"{stack.served.url}/alerts/alertmanager", json=payload, headers=ALERT_AUTH, timeout=10
    )
    assert sent.status_code == 200, sent.text


def alert_root(stack: Stack) -> StoredMessage:
    def found() -> bool:
        return any(
            "FailedJobsAccumulating" in m.content and "workers" in m.content
            for m in stack.fake.channel_messages(CHANNEL)
        )

    stack.fake.wait_until(found, 30)
    (root,) = [
        m
        for m in stack.fake.channel_messages(CHANNEL)
        if "FailedJobsAccumulating" in m.content and "workers" in m.content
    ]
    return root


def test_an_alert_thread_then_an_incident_declared_from_it_with_a_notification(
    stack: Stack,
) -> None:
    alertmanager(stack, "firing")
    root = alert_root(stack)
    assert "FIRING" in root.content
    declare = next(c for c in root.custom_ids if c.startswith("inc:declare:"))

    # the thread hangs from the root; the triage and the news go inside it
    stack.fake.wait_until(lambda: stack.fake.thread_of(root.id) is not None, 30)
    inside = lambda: stack.fake.channel_messages(root.id)  # noqa: E731 - the thread's id
    stack.fake.wait_until(lambda: any("Triage" in m.content for m in inside()), 30)
    assert stack.fake.rest("POST", f"/messages/{root.id}/threads")[0].status == 201
    # posted again (Alertmanager repeats itself): no second root, no second thread
    alertmanager(stack, "firing")
    time.sleep(1)
    assert len([m for m in stack.fake.channel_messages(CHANNEL) if m.id == root.id]) == 1
    assert len(stack.fake.rest("POST", f"/messages/{root.id}/threads")) == 1

    # dora, the duty officer, declares the incident from the alert's button: its form
    # opens filled with the alert's scenario, summary and queue, and she sends it
    clicked = stack.fake.click(declare, message_id=root.id, user=DISCORD_DORA)
    stack.fake.wait_until(lambda: bool(clicked.callbacks))
    assert clicked.callbacks[0]["type"] == 9  # a modal, as the first response
    sent = stack.fake.submit(clicked, {}, user=DISCORD_DORA)
    assert "declared (gd:failed-jobs-accumulating), led by dora" in answered(stack.fake, sent)
    stack.fake.wait_until(lambda: any("INC-" in m.content for m in inside()), 30)
    checklist = next(m for m in inside() if "INC-" in m.content)
    number = checklist.content.split("INC-", 1)[1].split()[0].strip("*:,.")

    told = stack.fake.command(
        "incident",
        "notify",
        {"audience": "operators", "text": "workers are failing; a fix is on its way"},
        user=DISCORD_DORA,
    )
    answered(stack.fake, told)
    stack.fake.wait_until(
        lambda: any(
            "a fix is on its way" in m.content for m in stack.fake.channel_messages(OPERATORS)
        ),
        30,
    )
    assert f"INC-{number}" in answered(stack.fake, told)

    alertmanager(stack, "resolved")
    stack.fake.wait_until(lambda: "RESOLVED" in root.content, 30)
    stack.fake.wait_until(lambda: any("resolved" in m.content for m in inside()), 30)


def test_reminders_and_the_escalation_of_a_missed_deadline_reach_discord(stack: Stack) -> None:
    """Nobody tells the operators of a drill incident declared from Discord: its lead is
    reminded in the incident's thread, and at the deadline the miss is escalated there
    and in the operators' Discord channel."""
    declared = stack.fake.command(
        "incident",
        "declare",
        {"scenario": DRILL, "summary": "drill: nothing finishes", "queue": "workers"},
        user=DISCORD_DORA,
    )
    said = answered(stack.fake, declared)
    number = said.split("INC-", 1)[1].split()[0].strip("*:,.")
    missed = f"INC-{number}: communication to the operators missed"

    def escalated() -> list[StoredMessage]:  # in any channel or thread
        return [m for m in list(stack.fake.messages.values()) if missed in m.content]

    stack.fake.wait_until(lambda: len(escalated()) >= 2, 40)  # the thread and the channel
    time.sleep(1)  # a second firing would show by now
    escalations = escalated()
    reminders = [
        m
        for m in list(stack.fake.messages.values())
        if f"--incident INC-{number} " in m.content and "the operators must be told by" in m.content
    ]
    assert len(reminders) == 2, [m.content for m in reminders]  # at half and at 80%
    assert {m.channel_id for m in reminders} == {reminders[0].channel_id} != {OPERATORS}
    assert len(escalations) == 2, [m.content for m in escalations]
    assert {m.channel_id for m in escalations} == {reminders[0].channel_id, OPERATORS}


def test_rate_limits_are_waited_out_and_the_answer_still_arrives(stack: Stack) -> None:
    limited = len([c for c in stack.fake.calls if c.status == 429])
    stack.fake.rate_limit(2, retry_after=0.3)
    i = stack.fake.command("queue", "stuck", {"queue": "workers"}, user=DISCORD_BOB)
    answered(stack.fake, i)
    assert len([c for c in stack.fake.calls if c.status == 429]) == limited + 2
    assert i.callbacks[0]["type"] == 5  # the first response is never held up


def test_commands_refused_by_discord_are_one_clear_line(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("discord-refused")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        FakeSlack().start() as slack,
    ):
        fake.refuse_commands = True
        with_drill(workdir)
        with running_serve(workdir, db_url, _env(fake, slack), extra=EXTRA) as served:
            served.wait_for_log(f"is the bot in guild {GUILD}, invited with the")
            body = web.get(f"{served.url}/readyz", timeout=5).json()
            assert "refused queuebot's commands (403" in body["discord"]
            assert fake.identified == 0  # it stopped there, not in a retry loop


def test_without_a_guild_the_commands_are_registered_globally(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("discord-global")
    with_drill(workdir)
    everywhere = EXTRA.replace(f'[discord]\nguild = "{GUILD}"\n', "")
    assert "[discord]" not in everywhere
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        FakeSlack().start() as slack,
        running_serve(workdir, db_url, _env(fake, slack), extra=everywhere) as served,
    ):
        wait_ready(served)
        assert list(fake.commands) == ["global"]
        assert {c["name"] for c in fake.commands["global"]} == {
            "queue",
            "incident",
            "Declare incident",  # a message's context menu
        }
        i = fake.command("queue", "triage", {"queue": "workers"}, user=DISCORD_BOB)
        assert "workers" in answered(fake, i)
