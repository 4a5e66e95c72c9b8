"""Forms on Slack end to end: the real `queuebot serve`, signed slash commands, clicks,
shortcuts and form submissions built as Slack builds them, and the fake Slack's
``views.open`` checking every form against Block Kit's limits (slack_sdk's models)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from testkit import web
from testkit.slack_requests import (
    interaction_body,
    message_action,
    send_interaction,
    signed,
    slash_fields,
    view_submission,
)
from tests.e2e.slack_stack import Stack, answer_to, opened, serving_stack, texts
from tests.helpers.people import SLACK_ALICE, SLACK_BOB, SLACK_DORA, SLACK_STRANGER


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with serving_stack(request.param, tmp_path_factory.mktemp("slack-forms")) as made:
        yield made


_counter = iter(range(1, 1_000_000))


def slash(stack: Stack, text: str, *, user: str, group: str = "queue") -> str:
    """A signed slash command; the name of its response_url."""
    n = next(_counter)
    name = f"form{n}-{time.monotonic_ns()}"
    fields = slash_fields(stack.fake, text, name=name, user=user, trigger=f"{n}.{name}")
    body = urlencode({**fields, "command": f"/{group}"})
    response = web.post(f"{stack.url}/slack/events", content=body, headers=signed(body), timeout=10)
    assert response.status_code == 200
    return name


def form_of(
    stack: Stack, text: str, *, user: str, group: str = "queue"
) -> tuple[dict[str, Any], str]:
    before = set(stack.fake.views)
    name = slash(stack, text, user=user, group=group)
    return opened(stack, before), name


def submit(
    stack: Stack, view: dict[str, Any], values: dict[str, str | None], *, user: str
) -> tuple[httpx.Response, dict[str, Any]]:
    payload = view_submission(view, values, user=user)
    return send_interaction(stack.url, payload), payload


def block(view: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in view["blocks"] if b.get("block_id") == name)


def requests_count(stack: Stack) -> int:
    return int(stack.sql("SELECT count(*) FROM qb_change_requests")[0][0])


def delivered(stack: Stack, key: str) -> int:
    return int(stack.sql("SELECT count(*) FROM qb_deliveries WHERE key = :k", k=key)[0][0])


def test_a_redrive_without_its_reason_opens_a_form_and_its_submission_asks_once(
    stack: Stack,
) -> None:
    before = requests_count(stack)
    started = time.monotonic()
    view, name = form_of(stack, "redrive --error-like ffmpeg --sample 2", user=SLACK_ALICE)
    assert time.monotonic() - started < 3  # within the trigger's 3 s
    assert view["callback_id"] == "qbform:redrive"
    assert view["title"]["text"] == "Redrive dead letters"
    selection = block(view, "selection")["element"]
    assert selection["initial_value"] == "--error-like ffmpeg --sample 2"  # what was typed
    assert block(view, "reason")["optional"] is False
    assert block(view, "evidence")["optional"] is True
    assert block(view, "evidence")["element"]["type"] == "url_text_input"
    assert not stack.fake.recorded(f"/response/{name}")  # the form is the answer
    assert requests_count(stack) == before

    # a wrong value: shown on its field, the form stays open, nothing written down
    wrong, payload = submit(
        stack, view, {"reason": "OOM fix deployed", "evidence": "the dashboard"}, user=SLACK_ALICE
    )
    assert wrong.status_code == 200
    said = wrong.json()
    assert said["response_action"] == "errors"
    assert list(said["errors"]) == ["evidence"]
    assert "https://" in said["errors"]["evidence"]
    key = f"slack:view:{view['id']}"
    assert delivered(stack, key) == 0
    too_short, _ = submit(stack, view, {"reason": "ok"}, user=SLACK_ALICE)
    assert too_short.json()["errors"] == {"reason": "String should have at least 3 characters"}

    # right: written down before the form closes, then answered where the command was
    values = {"reason": "OOM fix deployed", "evidence": "https://deploys.example/4411"}
    right, payload = submit(stack, view, values, user=SLACK_ALICE)
    assert right.status_code == 200 and right.content in (b"", b"{}")
    assert delivered(stack, key) == 1
    answer = answer_to(stack.fake, name)
    assert "staged redrive of 14 dead letter(s) in queue clips" in texts(answer)
    assert answer.body["response_type"] == "in_channel"
    # Slack retries the submission: a repeat, ignored; the request exists once
    body = interaction_body(payload)
    retry = web.post(
        f"{stack.url}/slack/events",
        content=body,
        headers={**signed(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
        timeout=10,
    )
    assert retry.status_code == 200
    stack.served.wait_for_log(f"repeated delivery {key}: acted on or in hand already, ignored")
    assert requests_count(stack) == before + 1
    (reason, evidence) = stack.sql(
        "SELECT reason, evidence FROM qb_change_requests ORDER BY id DESC LIMIT 1"
    )[0]
    assert (reason, evidence) == ("OOM fix deployed", "https://deploys.example/4411")
    assert len(stack.fake.recorded(f"/response/{name}")) == 1


def test_a_rejection_decided_meanwhile_is_answered_as_the_command_would_be(stack: Stack) -> None:
    (failed,) = stack.sql("SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    asked = slash(stack, f'requeue {failed} --queue workers --reason "retry it"', user=SLACK_ALICE)
    number = texts(answer_to(stack.fake, asked)).split("CR-", 1)[1].split(":")[0].split()[0]
    view, name = form_of(stack, f"reject CR-{number}", user=SLACK_BOB)
    assert view["title"]["text"] == f"Reject CR-{number}"
    assert block(view, "reason")["optional"] is True  # reject takes no reason it must have
    too_long, _ = submit(stack, view, {"reason": "x" * 501}, user=SLACK_BOB)
    assert too_long.json()["errors"]["reason"] == "Longer than 500 characters"
    # alice withdraws it meanwhile, typing the command whole: no form
    withdrawn = slash(stack, f'reject CR-{number} --reason "not needed"', user=SLACK_ALICE)
    assert "withdrawn by alice" in texts(answer_to(stack.fake, withdrawn))
    right, _ = submit(stack, view, {"reason": "wrong tenant"}, user=SLACK_BOB)
    assert right.status_code == 200
    late = answer_to(stack.fake, name)
    assert "Already decided" in texts(late)
    assert late.body["response_type"] == "ephemeral"


def test_a_form_that_cannot_open_in_time_is_answered_in_words(stack: Stack) -> None:
    before = set(stack.fake.views)
    stack.fake.expire_triggers()
    try:
        name = slash(stack, "resume P-7", user=SLACK_ALICE)
        said = texts(answer_to(stack.fake, name))
    finally:
        stack.fake.expire_triggers(False)
    assert "could not open in time" in said and "nothing was done" in said
    assert '/queue resume P-7 --reason \\"WHY\\"' in said
    assert set(stack.fake.views) == before


def test_whoever_may_not_run_the_command_is_refused_not_given_a_form(stack: Stack) -> None:
    before = set(stack.fake.views)
    name = slash(stack, "redrive --all", user=SLACK_STRANGER)
    said = texts(answer_to(stack.fake, name))
    assert "your slack account U0NOBODY is not listed under [people]" in said
    refused = incident_slash(stack, "declare", user=SLACK_ALICE)
    assert "declaration authority of no runbook" in texts(answer_to(stack.fake, refused))
    assert set(stack.fake.views) == before


def incident_slash(stack: Stack, text: str, *, user: str) -> str:
    return slash(stack, text, user=user, group="incident")


def test_a_declaration_and_an_override_by_form(stack: Stack) -> None:
    before = set(stack.fake.views)
    name = incident_slash(stack, "declare", user=SLACK_DORA)
    view = opened(stack, before)
    assert view["callback_id"] == "qbform:declare"
    scenarios = [o["value"] for o in block(view, "scenario")["element"]["options"]]
    assert "gd:queue-loss" in scenarios
    queues = [o["value"] for o in block(view, "queue")["element"]["options"]]
    assert {"workers", "clips"} <= set(queues)
    wrong, _ = submit(stack, view, {"summary": "x"}, user=SLACK_DORA)
    errors = wrong.json()["errors"]
    assert set(errors) == {"scenario", "summary"}
    right, payload = submit(
        stack,
        view,
        {"scenario": "gd:queue-loss", "summary": "jobs stopped finishing", "queue": "clips"},
        user=SLACK_DORA,
    )
    assert right.status_code == 200
    declared = texts(answer_to(stack.fake, name))
    assert "declared (gd:queue-loss), led by dora" in declared
    number = declared.split("INC-", 1)[1].split()[0]
    assert send_interaction(stack.url, payload).status_code == 200  # sent once more
    stack.served.wait_for_log(f"repeated delivery slack:view:{view['id']}: acted on")
    declarations = stack.sql(
        "SELECT count(*) FROM qb_audit_events WHERE action = 'incident.declared' AND subject = :s",
        s=f"INC-{number}",
    )
    assert declarations == [(1,)]

    before = set(stack.fake.views)
    override = incident_slash(stack, f"resolve INC-{number} --override", user=SLACK_DORA)
    view = opened(stack, before)
    assert view["title"]["text"] == f"Resolve INC-{number}"
    submit(stack, view, {"reason": "counts match, checked by hand"}, user=SLACK_DORA)
    asked = texts(answer_to(stack.fake, override))
    assert "CR-" in asked and "resolve" in asked
    (reason,) = stack.sql(
        "SELECT reason FROM qb_change_requests WHERE incident = :i", i=f"INC-{number}"
    )[0]
    assert reason == "counts match, checked by hand"


def test_a_message_shortcut_opens_the_declaration_form_with_the_message(stack: Stack) -> None:
    before = set(stack.fake.views)
    name = f"shortcut-{time.monotonic_ns()}"
    payload = message_action(
        stack.fake,
        "queuebot_declare_from_message",
        user=SLACK_DORA,
        name=name,
        text="uploads stuck since 02:10, customers report it",
    )
    assert send_interaction(stack.url, payload).status_code == 200
    view = opened(stack, before)
    summary = block(view, "summary")["element"]["initial_value"]
    assert summary == "uploads stuck since 02:10, customers report it"
    right, _ = submit(
        stack, view, {"scenario": "gd:queue-loss", "queue": "workers"}, user=SLACK_DORA
    )
    assert right.status_code == 200
    said = texts(answer_to(stack.fake, name))
    assert "gd:queue-loss" in said and "dora" in said
    checklist = stack.fake.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and "uploads stuck since 02:10" in c.body.get("text", "")
        )
    )[0]
    assert checklist.body["channel"] == "C0OPS"  # where the message was


@pytest.mark.parametrize(
    ("group", "typed", "title", "named"),
    [
        ("queue", "resume P-99", "Resume P-99", "P-99"),
        ("queue", "rollback P-99", "Roll back P-99", "P-99"),
        ("incident", "resolve INC-99 --override", "Resolve INC-99", "INC-99"),
    ],
)
def test_a_reason_form_checks_its_reason_and_runs_once(
    stack: Stack, group: str, typed: str, title: str, named: str
) -> None:
    before = set(stack.fake.views)
    name = slash(stack, typed, user=SLACK_DORA, group=group)
    view = opened(stack, before)
    assert view["title"]["text"] == title
    wrong, _ = submit(stack, view, {"reason": None}, user=SLACK_DORA)
    assert "say why" in wrong.json()["errors"]["reason"]
    right, payload = submit(stack, view, {"reason": "second fix deployed"}, user=SLACK_DORA)
    assert right.status_code == 200
    said = texts(answer_to(stack.fake, name))
    assert named in said  # the command's own answer: there is no such plan or incident
    again = send_interaction(stack.url, payload)  # the same submission once more
    assert again.status_code == 200
    stack.served.wait_for_log(f"repeated delivery slack:view:{view['id']}: acted on")
    assert len(stack.fake.recorded(f"/response/{name}")) == 1
