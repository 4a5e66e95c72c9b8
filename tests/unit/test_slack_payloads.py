"""Reading what Slack sends into a delivery (bot/slack/payloads.py): every part queuebot
keeps, records in the ledger or answers to is checked, a payload of a shape Slack never
sends is Malformed (a 400), and a button naming no change request is an UnknownButton (a
clear reply)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.slack.payloads import (
    Delivery,
    Malformed,
    UnknownButton,
    answer_url,
    button_click,
    command_delivery,
)
from commands.model import Approve, Dlq, Reject, Triage

API = "https://slack.com/api/"
FAKE_API = "http://127.0.0.1:5555/api/"
HOOK = "https://hooks.slack.com/commands/T0FAKE/1/abc"


def command(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user_id": "U0ALICE",
        "channel_id": "C0OPS",
        "text": "triage --queue workers",
        "response_url": HOOK,
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def click(action_id: str = "cr:approve:17", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U0BOB"},
        "channel": {"id": "C0OPS"},
        "container": {"type": "message", "thread_ts": "1764480000.000001"},
        "response_url": HOOK,
        "actions": [{"action_id": action_id, "action_ts": "1764480001.000002"}],
    }
    body.update(changes)
    return body


def test_a_slash_command_becomes_a_delivery() -> None:
    assert command_delivery(command(), group="queue", slack_api=API) == Delivery(
        key="slack:command:13345224609.738474920.8088930838d88f008e0",
        where="Slack /queue",
        user="U0ALICE",
        channel="C0OPS",
        response_url=HOOK,
        group="queue",
        text="triage --queue workers",
        trigger="13345224609.738474920.8088930838d88f008e0",  # a form opens with it
    )


def test_a_click_becomes_a_decision() -> None:
    approve = button_click(click(), slack_api=API)
    assert isinstance(approve, Delivery)
    assert approve.key == "slack:action:1764480001.000002:U0BOB:cr:approve:17"
    assert approve.decision == Approve(request=17)
    assert (approve.user, approve.channel, approve.thread) == (
        "U0BOB",
        "C0OPS",
        "1764480000.000001",
    )
    reject = button_click(click("cr:reject:3"), slack_api=API)
    assert isinstance(reject, Delivery) and reject.decision == Reject(request=3)


@pytest.mark.parametrize(
    ("changes", "part"),
    [
        ({"trigger_id": "1.\x00.nul"}, "trigger_id"),
        ({"trigger_id": None}, "trigger_id"),
        ({"trigger_id": ""}, "trigger_id"),
        ({"trigger_id": "has space"}, "trigger_id"),
        ({"trigger_id": "a:b"}, "trigger_id"),
        ({"trigger_id": "x" * 151}, "trigger_id"),
        ({"trigger_id": 17}, "trigger_id"),
        ({"user_id": None}, "user_id"),
        ({"user_id": "U0\x00"}, "user_id"),
        ({"channel_id": "C0 OPS"}, "channel_id"),
        ({"text": "requeue 1 --reason \x00"}, "text"),
        ({"text": ["not", "text"]}, "text"),
        ({"response_url": None}, "response_url"),
        ({"response_url": "not a url"}, "response_url"),
        ({"response_url": "http://hooks.slack.com/commands/x"}, "response_url"),
        ({"response_url": "ftp://hooks.slack.com/x"}, "response_url"),
        ({"response_url": "https://"}, "response_url"),
        ({"response_url": "https://host:99999999/x"}, "response_url"),
    ],
    ids=repr,
)
def test_a_command_slack_would_never_send_is_malformed(changes: dict[str, Any], part: str) -> None:
    with pytest.raises(Malformed, match=part):
        command_delivery(command(**changes), group="queue", slack_api=API)


def test_a_command_without_a_channel_or_text_is_fine() -> None:
    delivery = command_delivery(
        {k: v for k, v in command().items() if k not in ("channel_id", "text")},
        group="queue",
        slack_api=API,
    )
    assert delivery.channel is None and delivery.text == ""


@pytest.mark.parametrize(
    ("body", "part"),
    [
        (click(actions="x"), "action_id"),
        (click(actions=[]), "action_id"),
        (click(actions=[{"action_id": 5}]), "action_id"),
        (click(user="U0BOB"), "user.id"),
        (click(user={"id": "U0\x00"}), "user.id"),
        (click(actions=[{"action_id": "cr:approve:17", "action_ts": None}]), "action_ts"),
        (click(actions=[{"action_id": "cr:approve:17", "action_ts": "1:2"}]), "action_ts"),
        (click(channel={"id": "C0\nOPS"}), "channel.id"),
        (click(container={"thread_ts": "\x00"}), "container.thread_ts"),
        (click(response_url="javascript:alert(1)"), "response_url"),
    ],
    ids=repr,
)
def test_a_click_slack_would_never_send_is_malformed(body: dict[str, Any], part: str) -> None:
    with pytest.raises(Malformed, match=part):
        button_click(body, slack_api=API)


def test_a_click_in_the_app_home_has_no_response_url_and_is_still_a_decision() -> None:
    """A view's button (the App Home's Approve) carries no response_url and no channel:
    the click is read all the same, to be answered in the person's Messages tab."""
    body = click(container={"type": "view", "view_id": "V0HOME"}, response_url=None)
    del body["channel"]
    home = button_click(body, slack_api=API)
    assert isinstance(home, Delivery)
    assert home.decision == Approve(request=17)
    assert home.response_url == "" and home.channel is None
    # a message's button without one is still refused
    with pytest.raises(Malformed, match="response_url"):
        button_click(click(response_url=None), slack_api=API)


def test_an_alert_threads_buttons_become_reads_of_their_queue() -> None:
    triage = button_click(click("q:triage:workers"), slack_api=API)
    assert isinstance(triage, Delivery) and triage.decision == Triage(queue="workers")
    failed = button_click(click("q:failed:clips"), slack_api=API)
    assert isinstance(failed, Delivery) and failed.decision == Dlq(queue="clips")


@pytest.mark.parametrize(
    "action_id",
    ["cr:approve:0", "cr:reject:000", "cr:approve:x1", "cr:frob:3", "cr:approve:1234567890123",
     "q:triage:", "q:triage:Workers", "q:frob:workers", "q:failed:a b"],
)  # fmt: skip
def test_a_button_naming_no_request_is_an_unknown_button(action_id: str) -> None:
    assert button_click(click(action_id), slack_api=API) == UnknownButton(action_id, HOOK)


@pytest.mark.parametrize(
    ("url", "api", "allowed"),
    [
        (HOOK, API, True),
        ("https://hooks.slack-gov.com/commands/x", API, True),
        ("http://127.0.0.1:5555/response/a", FAKE_API, True),  # the tests' fake Slack
        ("http://127.0.0.1:5556/response/a", FAKE_API, False),  # another port
        ("http://localhost:5555/response/a", FAKE_API, False),  # another host
        ("http://127.0.0.1:5555/response/a", API, False),  # plain http, Slack is elsewhere
        ("https://127.0.0.1:5555/response/a", API, True),
    ],
)
def test_answers_go_over_https_or_to_the_configured_slack(
    url: str, api: str, allowed: bool
) -> None:
    if allowed:
        assert answer_url(url, api) == url
    else:
        with pytest.raises(Malformed):
            answer_url(url, api)


ids = st.text(min_size=0, max_size=300)


@settings(max_examples=300, deadline=None)
@given(trigger=ids, user=ids, ts=ids, number=st.integers(-5, 10**13))
def test_every_accepted_key_is_printable_and_fits_the_ledger_whole(
    trigger: str, user: str, ts: str, number: int
) -> None:
    for read in (
        lambda: command_delivery(
            command(trigger_id=trigger, user_id=user), group="queue", slack_api=API
        ),
        lambda: button_click(
            click(
                f"cr:approve:{number}",
                user={"id": user},
                actions=[{"action_id": f"cr:approve:{number}", "action_ts": ts}],
            ),
            slack_api=API,
        ),
    ):
        try:
            delivery = read()
        except Malformed:
            continue
        if isinstance(delivery, Delivery):
            assert delivery.key.isascii() and delivery.key.isprintable()
            assert " " not in delivery.key and len(delivery.key) <= 200
            assert delivery.decision is None or delivery.decision.request >= 1  # type: ignore[attr-defined]
