"""The fake chat platforms (testkit/) as a test's serve is wired to them, and a Slack
button click as Slack sends it."""

from __future__ import annotations

import time
from typing import Any

from testkit.fake_discord import DEFAULT_TOKEN, FakeDiscord
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import SECRET


def slack_env(
    fake: FakeSlack, *, token: str = "xoxb-fake-token", secret: str = SECRET
) -> dict[str, str]:
    """The variables of a serve that talks to the fake Slack ``fake``."""
    return {
        "SLACK_BOT_TOKEN": token,
        "SLACK_SIGNING_SECRET": secret,
        "SLACK_API_BASE_URL": fake.api_url,
    }


def discord_env(fake: FakeDiscord, *, token: str = DEFAULT_TOKEN) -> dict[str, str]:
    """The variables of a serve that talks to the fake Discord ``fake``."""
    return {"DISCORD_BOT_TOKEN": token, "DISCORD_API_BASE_URL": fake.api_url}


def button_click(
    fake: FakeSlack, action_id: str, *, user: str, name: str, action_ts: str | None = None
) -> dict[str, Any]:
    """The ``block_actions`` payload of ``user`` clicking the button ``action_id`` on a
    message in #ops; its answer goes to the fake's response_url ``name``, and it was
    clicked at ``action_ts`` (now where not given)."""
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0FAKE"},
        "api_app_id": "A0QUEUEBOT",
        "token": "legacy",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "container": {
            "type": "message",
            "message_ts": "1764480000.000001",
            "channel_id": "C0OPS",
            "is_ephemeral": False,
        },
        "trigger_id": f"t-{name}",
        "channel": {"id": "C0OPS", "name": "ops"},
        "message": {"type": "message", "ts": "1764480000.000001", "text": "CR"},
        "response_url": fake.response_url(name),
        "actions": [_pressed(action_id, action_ts)],
    }


def home_click(action_id: str, *, user: str, action_ts: str | None = None) -> dict[str, Any]:
    """The ``block_actions`` payload of ``user`` clicking the button ``action_id`` in their
    App Home: a view's button, which carries no response_url and no channel."""
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0FAKE"},
        "api_app_id": "A0QUEUEBOT",
        "token": "legacy",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "container": {"type": "view", "view_id": "V00000001"},
        "trigger_id": f"t-home-{time.monotonic_ns()}",
        "view": {"id": "V00000001", "type": "home", "blocks": [], "hash": "1.V00000001"},
        "actions": [_pressed(action_id, action_ts)],
    }


def _pressed(action_id: str, action_ts: str | None) -> dict[str, Any]:
    """The button pressed, as a ``block_actions`` payload's one action."""
    return {
        "action_id": action_id,
        "block_id": "b1",
        "type": "button",
        "value": action_id,
        "text": {"type": "plain_text", "text": "Approve"},
        "action_ts": action_ts or f"{time.time():.6f}",
    }
