"""Posting only: queuebot's Slack posts carry no button Slack could never deliver a click
of (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.worker import chat_notifier
from services.config import load_config
from services.message import Actions, Button, Heading, Message, Text
from testkit.fake_slack import FakeSlack

MESSAGE = Message(
    "CR-4: redrive 3 row(s) - waiting for approval",
    (
        Heading("CR-4"),
        Text("waiting for approval"),
        Actions((Button("cr:approve:4", "Approve", "primary", "/queue approve CR-4"),)),
    ),
)


@pytest.mark.parametrize("posting_only", [True, False])
async def test_posting_only_posts_carry_no_buttons(
    fake: FakeSlack, tmp_path: Path, posting_only: bool
) -> None:
    path = tmp_path / "queuebot.toml"
    path.write_text(
        '[channels.alerts]\nslack = "C0ALERTS"\n[slack]\npost_interval_seconds = 0\n'
        f"posting_only = {str(posting_only).lower()}\n"
    )
    config = load_config(
        path,
        environ={"SLACK_BOT_TOKEN": "xoxb-fake", "SLACK_API_BASE_URL": fake.api_url},
    )
    posts = chat_notifier(config)
    assert posts is not None
    try:
        await posts.post(channel="alerts", message=MESSAGE)
    finally:
        await posts.close()
    (sent,) = fake.recorded("/api/chat.postMessage")
    kinds = [block["type"] for block in sent.body["blocks"]]
    assert ("actions" in kinds) is not posting_only, kinds
    assert sent.body["text"] == MESSAGE.summary
