"""The Slack notifier posts and updates through the Web API, honouring 429 Retry-After."""

from __future__ import annotations

import time

from pydantic import SecretStr

from bot.slack.app import web_client
from bot.slack.notifier import SlackNotifier
from services.config import EnvSettings
from services.message import Heading, Message, Text
from testkit.fake_slack import FakeSlack


def notifier(fake: FakeSlack) -> SlackNotifier:
    env = EnvSettings.model_validate(
        {"SLACK_BOT_TOKEN": SecretStr("xoxb-fake"), "SLACK_API_BASE_URL": fake.api_url}
    )
    return SlackNotifier(web_client(env), {"alerts": "C0ALERTS"})


MESSAGE = Message("Queue workers: 24 failed", (Heading("Triage"), Text("24 failed")))


async def test_post_into_channel_and_thread_then_update(fake: FakeSlack) -> None:
    slack = notifier(fake)
    (ref,) = await slack.post(channel="alerts", message=MESSAGE)
    assert ref.platform == "slack" and ref.channel == "C0ALERTS"
    (reply,) = await slack.post(channel="alerts", message=MESSAGE, thread=ref)
    assert reply.thread_id == ref.message_id
    await slack.update(ref=ref, message=Message("resolved", (Text("resolved"),)))
    posts = fake.recorded("/api/chat.postMessage")
    assert [p.body["channel"] for p in posts] == ["C0ALERTS", "C0ALERTS"]
    assert posts[1].body["thread_ts"] == ref.message_id
    assert posts[0].body["text"] == "Queue workers: 24 failed"
    (update,) = fake.recorded("/api/chat.update")
    assert update.body["ts"] == ref.message_id


async def test_posts_reuse_one_connection_until_closed(fake: FakeSlack) -> None:
    """slack_sdk alone opens a connection (a TLS handshake with Slack) per call; queuebot's
    client keeps one open between calls, and closes it with the notifier."""
    slack = notifier(fake)
    (ref,) = await slack.post(channel="alerts", message=MESSAGE)
    for _ in range(3):
        await slack.post(channel="alerts", message=MESSAGE, thread=ref)
    await slack.update(ref=ref, message=MESSAGE)
    peers = {c.peer for c in fake.calls}
    assert len(fake.calls) == 5 and len(peers) == 1 and None not in peers
    await slack.close()
    assert slack.client.session is not None and slack.client.session.closed


async def test_unknown_channel_name_posts_nothing(fake: FakeSlack) -> None:
    assert await notifier(fake).post(channel="actors", message=MESSAGE) == []
    assert fake.recorded("/api/chat.postMessage") == []


async def test_rate_limited_post_waits_for_retry_after(fake: FakeSlack) -> None:
    fake.rate_limit(1)
    started = time.monotonic()
    (ref,) = await notifier(fake).post(channel="alerts", message=MESSAGE)
    waited = time.monotonic() - started
    limited = fake.recorded("/api/chat.postMessage#429")
    delivered = [c for c in fake.recorded() if c.path == "/api/chat.postMessage"]
    assert len(limited) == 1 and len(delivered) == 1 and ref.message_id
    assert delivered[0].at - limited[0].at >= 1.0 and waited >= 1.0
