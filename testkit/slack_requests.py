"""The request signer shared by the tests and the benchmarks: requests built the way Slack
builds them, the signature over ``v0:{ts}:{body}``, the fields of a slash command, and the
Events API's callbacks (``event_callback``, ``url_verification``) as JSON bodies with
their signed headers (``send_event`` posts one to a serve's /slack/events), and the
interactions a form takes: a form submitted (``view_submission``) and a message shortcut
(``message_action``), posted with ``send_interaction``."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from typing import Any
from urllib.parse import urlencode

import httpx

from testkit import web
from testkit.fake_slack import FakeSlack

# the signing secret of the fake workspace: not a secret, the tests and benchmarks share it
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # noqa: S105


def signed(body: str | bytes, *, secret: str = SECRET, ts: int | None = None) -> dict[str, str]:
    """Slack's v0 signature headers: HMAC-SHA256 of ``v0:{timestamp}:{body}``, over the
    body's exact bytes (a ``str`` is taken as UTF-8)."""
    stamp = str(int(time.time()) if ts is None else ts)
    raw = body.encode() if isinstance(body, str) else body
    digest = hmac.new(secret.encode(), b"v0:%s:%s" % (stamp.encode(), raw), hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def slash_fields(
    fake: FakeSlack, text: str, *, name: str, user: str, trigger: str
) -> dict[str, str]:
    """What Slack sends for `/queue <text>`; its answer goes to the fake's response_url
    ``name``."""
    return {
        "token": "legacy",
        "team_id": "T0FAKE",
        "team_domain": "fake",
        "channel_id": "C0OPS",
        "channel_name": "ops",
        "user_id": user,
        "user_name": user.lower(),
        "command": "/queue",
        "text": text,
        "api_app_id": "A0QUEUEBOT",
        "is_enterprise_install": "false",
        "response_url": fake.response_url(name),
        "trigger_id": trigger,
    }


_events = itertools.count(1)


def event_callback(event: dict[str, Any], *, team: str = "T0FAKE") -> str:
    """The Events API envelope Slack posts for ``event`` (its ``type`` and fields), as
    Bolt expects it: ``type: event_callback``, the team, the app, an ``event_id`` of its
    own and the bot's authorization."""
    n = next(_events)
    now = int(time.time())
    return json.dumps(
        {
            "token": "legacy",
            "team_id": team,
            "api_app_id": "A0QUEUEBOT",
            "event": {"event_ts": f"{now}.{n:06d}", **event},
            "type": "event_callback",
            "event_id": f"Ev0FAKE{n:06d}",
            "event_time": now,
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": team,
                    "user_id": "U0BOT",
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }
    )


def members_changed(
    group: str, *, added: tuple[str, ...] = (), removed: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Slack's ``subteam_members_changed`` event: who joined and who left user group
    ``group``."""
    now = int(time.time())
    return {
        "type": "subteam_members_changed",
        "subteam_id": group,
        "team_id": "T0FAKE",
        "date_previous_update": now - 60,
        "date_update": now,
        "added_users": list(added),
        "added_users_count": str(len(added)),
        "removed_users": list(removed),
        "removed_users_count": str(len(removed)),
    }


def group_updated(group: str, users: tuple[str, ...] = ()) -> dict[str, Any]:
    """Slack's ``subteam_updated`` event: user group ``group`` as it is now."""
    return {
        "type": "subteam_updated",
        "subteam": {
            "id": group,
            "team_id": "T0FAKE",
            "is_usergroup": True,
            "name": group.lower(),
            "handle": group.lower(),
            "users": list(users),
            "user_count": len(users),
            "date_update": int(time.time()),
        },
    }


def url_verification(challenge: str) -> str:
    """What Slack posts to check an events URL: the challenge Bolt must answer with."""
    return json.dumps({"token": "legacy", "challenge": challenge, "type": "url_verification"})


def send_event(url: str, body: str, *, secret: str = SECRET) -> httpx.Response:
    """Post a JSON callback (``event_callback(...)``, ``url_verification(...)``) to the
    serve at ``url``, signed as Slack signs it."""
    headers = {**signed(body, secret=secret), "Content-Type": "application/json"}
    return web.post(f"{url}/slack/events", content=body, headers=headers, timeout=10)


def interaction_body(payload: dict[str, Any]) -> str:
    """The form-encoded body Slack posts for an interaction (``payload=<json>``)."""
    return urlencode({"payload": json.dumps(payload)})


def send_interaction(url: str, payload: dict[str, Any], *, secret: str = SECRET) -> httpx.Response:
    """Post an interaction payload (a click, a form submitted, a shortcut) to the serve at
    ``url``, signed as Slack signs it."""
    body = interaction_body(payload)
    return web.post(
        f"{url}/slack/events", content=body, headers=signed(body, secret=secret), timeout=10
    )


def view_submission(
    view: dict[str, Any], values: dict[str, str | None], *, user: str
) -> dict[str, Any]:
    """The ``view_submission`` Slack sends when ``user`` submits ``view`` (as the fake Slack
    keeps it: with its id) holding ``values`` by block_id: a field not named keeps what the
    form opened with, as Slack's does; None empties it. A select's value picks its option."""
    state: dict[str, dict[str, Any]] = {}
    for block in view.get("blocks", []):
        if block.get("type") != "input":
            continue
        element = block["element"]
        kind = element["type"]
        if kind == "static_select":
            initial = element.get("initial_option")
            wanted = values.get(block["block_id"], initial["value"] if initial else None)
            chosen = next((o for o in element["options"] if o["value"] == wanted), None)
            if wanted is not None and chosen is None:  # a value the select does not offer
                chosen = {"text": {"type": "plain_text", "text": wanted}, "value": wanted}
            entry: dict[str, Any] = {"type": kind, "selected_option": chosen}
        else:
            entry = {
                "type": kind,
                "value": values.get(block["block_id"], element.get("initial_value")),
            }
        state[block["block_id"]] = {element["action_id"]: entry}
    return {
        "type": "view_submission",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0FAKE"},
        "api_app_id": "A0QUEUEBOT",
        "token": "legacy",
        "trigger_id": f"{int(time.time())}.{next(_events)}.submit",
        "view": {**view, "state": {"values": state}, "team_id": "T0FAKE", "app_id": "A0QUEUEBOT"},
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def message_action(
    fake: FakeSlack,
    callback_id: str,
    *,
    user: str,
    name: str,
    text: str,
    message_ts: str = "1764480000.000100",
    thread_ts: str | None = None,
) -> dict[str, Any]:
    """A message shortcut (``message_action``) ``user`` chose on a message in #ops reading
    ``text``; its answers go to the fake's response_url ``name``."""
    message: dict[str, Any] = {
        "type": "message",
        "user": "U0SOMEONE",
        "ts": message_ts,
        "text": text,
    }
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
    return {
        "type": "message_action",
        "token": "legacy",
        "action_ts": f"{time.time():.6f}",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "user": {"id": user, "name": user.lower()},
        "channel": {"id": "C0OPS", "name": "ops"},
        "is_enterprise_install": False,
        "enterprise": None,
        "callback_id": callback_id,
        "trigger_id": f"{int(time.time())}.{next(_events)}.{name}",
        "response_url": fake.response_url(name),
        "message_ts": message_ts,
        "message": message,
    }
