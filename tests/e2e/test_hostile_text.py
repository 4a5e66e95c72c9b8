"""Outside text never mentions anyone or hides a link, on Slack or Discord: an
Alertmanager notification whose labels and annotations hold `<!channel>`, `<@U…>`,
`<https://…|click me>`, `@everyone`, `<@id>`, `<@&role>` and `[x](url)`, and an incident
declared and notified with the same in its summary and text, go through the real
`queuebot serve` to the local fake Slack and fake Discord. Each fake receives the text
escaped: Slack's top-level `text` of every post, update and answer as its mrkdwn blocks,
Discord's content with every mention broken and the masked link shown as typed, and
every Discord message sent with allowed_mentions none."""

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
from testkit.fake_discord import FakeDiscord, StoredMessage
from testkit.fake_slack import Call, FakeSlack
from testkit.slack_requests import signed, slash_fields
from tests.e2e.serving import ALERT_AUTH, Served, demo_database
from tests.e2e.test_discord import GUILD, serving
from tests.helpers.config import DETECTORS_OFF

ALERTS_DISCORD = "200000000000000001"  # [channels.alerts] in the demo config
OPS_DISCORD = "200000000000000009"
OPS_SLACK = "C0OPSBOTH"
DRILL = "gd:drill-discord"  # the drill runbook tests/e2e/test_discord.py's serving writes

SLACK_HOSTILE = "<!channel> <@U0BOB> <https://evil.example|click me>"
DISCORD_HOSTILE = (
    "@everyone @here <@100000000000000002> <@&300000000000000001> <#200000000000000009> "
    "[click me](https://evil.example)"
)
HOSTILE = f"{SLACK_HOSTILE} {DISCORD_HOSTILE}"
ESCAPED = "&lt;!channel&gt; &lt;@U0BOB&gt; &lt;https://evil.example|click me&gt;"

EXTRA = (
    f"""
[discord]
guild = "{GUILD}"

[channels.ops-both]
slack = "{OPS_SLACK}"
discord = "{OPS_DISCORD}"

[incidents.audiences]
operators = ["ops-both"]

[runbooks]
dir = "runbooks"

[slack]
post_interval_seconds = 0.2
"""
    # only the alerts a test sends: the demo's failed jobs would fire detectors
    + DETECTORS_OFF
)


@dataclass
class Stack:
    discord: FakeDiscord
    slack: FakeSlack
    served: Served


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("hostile")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as discord,
        FakeSlack().start() as slack,
        serving(discord, slack, workdir, db_url, extra=EXTRA) as served,
    ):
        yield Stack(discord, slack, served)


def notification(alerts: list[dict[str, Any]]) -> dict[str, Any]:
    name = f"Storm {HOSTILE}"
    return {
        "receiver": "queuebot",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": name, **a["labels"]},
                "annotations": a["annotations"],
                "startsAt": "2026-11-30T20:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus/graph",
                "fingerprint": a["fingerprint"],
            }
            for a in alerts
        ],
        "groupLabels": {"alertname": name},
        "commonLabels": {"alertname": name},
        "commonAnnotations": {"summary": HOSTILE},
        "externalURL": "http://alertmanager",
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{name}"}}',
        "truncatedAlerts": 0,
    }


FIRST = {
    "labels": {"instance": HOSTILE},
    "annotations": {"summary": HOSTILE, "description": HOSTILE},
    "fingerprint": "aaaa000000000001",
}
SECOND = {
    "labels": {"instance": f"second {HOSTILE}"},
    "annotations": {"summary": f"second {HOSTILE}"},
    "fingerprint": "aaaa000000000002",
}


def alertmanager(stack: Stack, alerts: list[dict[str, Any]]) -> None:
    sent = web.post(
        f"{stack.served.url}/alerts/alertmanager",
        json=notification(alerts),
        headers=ALERT_AUTH,
        timeout=10,
    )
    assert sent.status_code == 200, sent.text


def incident_command(stack: Stack, text: str) -> Call:
    """A signed `/incident` slash command from dora (the duty officer) on Slack, and the
    answer Slack's response_url got."""
    name = f"hostile-{time.monotonic_ns()}"
    fields = slash_fields(stack.slack, text, name=name, user="U0DORA", trigger=f"1.{name}")
    fields["command"] = "/incident"
    body = urlencode(fields)
    response = web.post(
        f"{stack.served.url}/slack/events", content=body, headers=signed(body), timeout=10
    )
    assert response.status_code == 200
    (answer,) = stack.slack.wait_for(lambda c: c.path == f"/response/{name}", timeout=30)
    return answer


def mrkdwn(blocks: list[dict[str, Any]]) -> list[str]:
    """Every text in the blocks that Slack reads as mrkdwn (plain_text, as in headers and
    buttons, is never read as markup)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn":
                found.append(str(node.get("text", "")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


RAW_SLACK = ("<!channel>", "<@U0BOB>", "<https://evil.example|click me>", "<!", "<@", "<http")


def assert_slack_escaped(call: Call) -> None:
    """Slack reads the top-level text and every mrkdwn text: neither holds a mention or a
    link in angle brackets, and what was sent shows escaped, as typed."""
    texts = [str(call.body.get("text", "")), *mrkdwn(_blocks(call))]
    for text in texts:
        for raw in RAW_SLACK:
            assert raw not in text, (call.path, raw, text)


def _blocks(call: Call) -> list[dict[str, Any]]:
    blocks = call.body.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def slack_shows(calls: list[Call], fragment: str) -> list[Call]:
    return [c for c in calls if fragment in json.dumps(c.body, ensure_ascii=False)]


def assert_discord_escaped(message: StoredMessage) -> None:
    content = message.content
    for raw in ("@everyone", "@here", "<@", "<#"):
        assert raw not in content, (raw, content)
    # a masked link is shown as typed: outside code, every bracket is escaped
    prose = re.sub(r"```.*?```|`[^`]*`", "", content, flags=re.DOTALL)
    assert "click me" in prose
    for bracket in re.finditer(r"(\\*)[\[\]]", prose):
        assert len(bracket[1]) % 2 == 1, content


def wait(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_hostile_alerts_incidents_and_notices_are_escaped_on_slack_and_discord(
    stack: Stack,
) -> None:
    slack, discord = stack.slack, stack.discord
    alertmanager(stack, [FIRST])
    slack.wait_for(
        lambda c: c.path == "/api/chat.postMessage" and c.body.get("channel") == "C0ALERTS"
    )
    wait(lambda: any("Storm" in m.content for m in discord.channel_messages(ALERTS_DISCORD)))
    # another alert joins the group: news in the thread, the root updated, on both
    alertmanager(stack, [FIRST, SECOND])
    slack.wait_for(lambda c: c.path == "/api/chat.update")
    slack.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and bool(c.body.get("thread_ts"))
            and "second" in json.dumps(c.body)
        ),
    )
    (root,) = [m for m in discord.channel_messages(ALERTS_DISCORD) if "Storm" in m.content]
    wait(lambda: root.edits > 0 and "2 of 2" in root.content)
    wait(lambda: any("second" in m.content for m in discord.channel_messages(root.id)))

    declared = incident_command(stack, f'declare {DRILL} "{HOSTILE}" --queue workers')
    number = re.search(r"INC-(\d+)", json.dumps(declared.body))
    assert number is not None, declared.body
    incident_command(stack, f'notify operators "told: {HOSTILE}"')
    slack.wait_for(
        lambda c: (
            c.path == "/api/chat.postMessage"
            and c.body.get("channel") == OPS_SLACK
            and "told" in json.dumps(c.body)
        )
    )
    wait(lambda: any("told" in m.content for m in discord.channel_messages(OPS_DISCORD)))

    # Slack: every post, update and answer, in its text and its mrkdwn blocks
    calls = [
        c
        for c in slack.recorded()
        if c.path in ("/api/chat.postMessage", "/api/chat.update")
        or c.path.startswith("/response/")
    ]
    for call in calls:
        assert_slack_escaped(call)
    # and what was typed is there, escaped, in the text as in the blocks of each kind
    incident = slack_shows(calls, "declared")
    for kind, found in (
        ("alert root", [c for c in calls if c.body.get("channel") == "C0ALERTS"]),
        ("alert update", [c for c in calls if c.path == "/api/chat.update"]),
        ("incident", incident),
        ("notice", [c for c in calls if c.body.get("channel") == OPS_SLACK]),
    ):
        assert found, kind
        assert any(ESCAPED in str(c.body.get("text")) for c in found), (kind, found[0].body)
        if kind != "incident":  # its summary is in the header, below
            assert any(ESCAPED in " ".join(mrkdwn(_blocks(c))) for c in found), kind
    # a header is plain_text, which Slack shows as typed and never reads as markup
    headers = [b["text"]["text"] for c in incident for b in _blocks(c) if b["type"] == "header"]
    assert any(SLACK_HOSTILE in h for h in headers), headers

    # Discord: every message queuebot sent or edited, and nothing it sent may ping
    sent = [
        m
        for channel in (ALERTS_DISCORD, root.id, OPS_DISCORD)
        for m in discord.channel_messages(channel)
    ]
    hostile = [m for m in sent if "click me" in m.content]
    assert len(hostile) >= 3, [m.content for m in sent]  # the root, the news, the notice
    assert any("told" in m.content for m in hostile)
    for message in hostile:
        assert_discord_escaped(message)
    for call in discord.calls:
        if call.method in ("POST", "PATCH") and "content" in call.body:
            assert call.body.get("allowed_mentions", {}).get("parse") == [], call.body
            assert not call.body["allowed_mentions"].get("users"), call.body
