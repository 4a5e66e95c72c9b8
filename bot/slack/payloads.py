"""What Slack sends, read into a delivery: every part queuebot keeps, answers to or records
is checked (a signed request is Slack's, but a payload of a shape Slack never sends must
not become a database error or an answer posted nowhere). A payload queuebot cannot act on
or answer is Malformed (a 400); a click on a button naming nothing queuebot can do is an
UnknownButton (a clear ephemeral reply). A delivery is written down in the ledger as
``request_of`` says and read back from it by ``delivery_of``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from bot.delivery import Asked
from commands.clicks import command_of
from commands.model import Command


@dataclass(frozen=True)
class Delivery:
    """What an acknowledged request asks: a command's text, or a button's decision."""

    key: str  # for the ledger: what Slack sends that makes this delivery unique
    where: str  # for the error boundary's log
    user: str
    channel: str | None
    response_url: str
    group: str = ""
    text: str = ""
    thread: str | None = None
    decision: Command | None = None  # a button: the command it stands for
    action_id: str = ""  # a button's, from which ``decision`` is read again after a crash
    trigger: str = ""  # Slack's trigger_id, good for opening a form for 3 s (not kept)
    # when Slack gave the response_url (a form's: the command that opened it), where that
    # is earlier than this delivery: an answer after its life goes to the channel
    since: datetime | None = None

    @property
    def asked(self) -> Asked:
        if self.action_id:
            return Asked(action_id=self.action_id)
        return Asked(group=self.group, text=self.text)


@dataclass(frozen=True)
class UnknownButton:
    """A click on a queuebot button whose id names nothing queuebot can act on."""

    action_id: str
    response_url: str


class Malformed(ValueError):
    """A signed payload queuebot cannot act on or answer; the message says which part."""


# What queuebot keeps of a payload. A ledger key is made of Slack's ids: each part
# printable ASCII without spaces or the key's separator ":" (so no two deliveries can
# share a key), and short enough that a key always fits the ledger whole (200
# characters): Slack's ids are a few dozen characters.
_ID = re.compile(r"[!-9;-~]+")
_MAX_TEXT = 10_000  # a slash command's text; Slack's are far shorter


def _dig(body: Any, *path: str) -> Any:
    """``body[path[0]][path[1]]...``, or None where a part is missing or not an object."""
    for key in path:
        if not isinstance(body, dict):
            return None
        body = body.get(key)
    return body


def _id(value: Any, name: str, longest: int = 64) -> str:
    if not isinstance(value, str) or len(value) > longest or not _ID.fullmatch(value):
        raise Malformed(f"{name} is missing or not a Slack id")
    return value


def _optional_id(value: Any, name: str) -> str | None:
    return None if value is None else _id(value, name)


def answer_url(value: Any, slack_api: str) -> str:
    """The response_url to answer at: an https URL (Slack's are https://hooks.slack.com/...)
    or one at the origin of SLACK_API_BASE_URL. Plain http is allowed there and nowhere
    else: that is how the tests' fake Slack, serving http on 127.0.0.1, gets its answers
    (SLACK_API_BASE_URL points at it), while a payload can never send queuebot's answer
    over plain http to any other address."""
    if not isinstance(value, str) or not re.fullmatch(r"[!-~]{1,2000}", value):
        raise Malformed("response_url is missing or not a URL")
    try:
        url, api = urlsplit(value), urlsplit(slack_api)
        origin = (url.scheme, url.hostname, url.port)
        api_origin = (api.scheme, api.hostname, api.port)
    except ValueError:
        raise Malformed("response_url is not a URL") from None
    if not url.hostname or (url.scheme != "https" and origin != api_origin):
        raise Malformed("response_url is not an https URL")
    return value


def command_delivery(body: dict[str, Any], *, group: str, slack_api: str) -> Delivery:
    """A slash command's delivery; Malformed names the part Slack would never send."""
    text = body.get("text", "")
    if not isinstance(text, str) or "\x00" in text or len(text) > _MAX_TEXT:
        raise Malformed("text is not a command's text")
    return Delivery(
        key=f"slack:command:{_id(body.get('trigger_id'), 'trigger_id', longest=150)}",
        where=f"Slack /{group}",
        user=_id(body.get("user_id"), "user_id"),
        channel=_optional_id(body.get("channel_id"), "channel_id"),
        response_url=answer_url(body.get("response_url"), slack_api),
        group=group,
        text=text,
        trigger=str(body.get("trigger_id")),
    )


def button_click(body: dict[str, Any], *, slack_api: str) -> Delivery | UnknownButton:
    """A click's delivery, or UnknownButton when the button names nothing queuebot can
    act on (``cr:approve:0``); Malformed names the part Slack would never send."""
    actions = body.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    action_id = _dig(action, "action_id")
    if not isinstance(action_id, str) or not action_id.isprintable() or len(action_id) > 255:
        raise Malformed("the action's action_id is missing or unreadable")
    if body.get("response_url") is None and _dig(body, "container", "type") == "view":
        response_url = ""  # a button in a view (the App Home): answered in the Messages tab
    else:
        response_url = answer_url(body.get("response_url"), slack_api)
    user = _id(_dig(body, "user", "id"), "user.id")
    decision = command_of(action_id)
    if decision is None:
        return UnknownButton(action_id, response_url)
    return Delivery(
        key=f"slack:action:{_id(_dig(action, 'action_ts'), 'action_ts')}:{user}:{action_id}",
        where=f"Slack button {action_id}",
        user=user,
        channel=_optional_id(_dig(body, "channel", "id"), "channel.id"),
        response_url=response_url,
        thread=_optional_id(_dig(body, "container", "thread_ts"), "container.thread_ts"),
        decision=decision,
        action_id=action_id,
        trigger=trigger_of(body),
    )


def trigger_of(body: dict[str, Any]) -> str:
    """The payload's trigger_id where it is one Slack sends, else "" (no form opens)."""
    trigger = body.get("trigger_id")
    if isinstance(trigger, str) and len(trigger) <= 150 and _ID.fullmatch(trigger):
        return trigger
    return ""


def request_of(d: Delivery) -> dict[str, Any]:
    """What the ledger keeps of a delivery: enough to do it and answer it again."""
    return {
        "platform": "slack",
        "where": d.where,
        "user": d.user,
        "channel": d.channel,
        "thread": d.thread,
        "response_url": d.response_url,
        "group": d.group,
        "text": d.text,
        "action_id": d.action_id,
        "since": d.since.isoformat() if d.since is not None else None,
    }


def delivery_of(key: str, request: dict[str, Any]) -> Delivery:
    """The delivery a ledger row wrote down (``request_of``), read back."""
    action_id = str(request.get("action_id") or "")
    return Delivery(
        key=key,
        where=str(request.get("where") or "Slack"),
        user=str(request["user"]),
        channel=request.get("channel"),
        response_url=str(request.get("response_url") or ""),
        group=str(request.get("group") or ""),
        text=str(request.get("text") or ""),
        thread=request.get("thread"),
        decision=command_of(action_id) if action_id else None,
        action_id=action_id,
        since=_when(request.get("since")),
    )


def _when(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
