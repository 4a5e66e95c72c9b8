"""The person who clicks is answered first: an approval's answer goes out on the click's
own response (Slack's response_url, Discord's interaction token) within a couple of
seconds, while the audit channel, answering every post 429 with a long Retry-After, holds
the post the approval made there. That post keeps its channel's pace and goes out, once,
after the channel takes posts again. A real `queuebot serve` on PostgreSQL, the fake
Slack and the fake Discord.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.fake_discord import DEFAULT_TOKEN, FakeDiscord
from tests.helpers.people import DISCORD_BOB, SLACK_BOB
from tests.reliability.harness import (
    Cluster,
    Figures,
    add_dead_letters,
    answers,
    click,
    cluster,
    executions,
    new_tag,
    request_redrives,
    send,
    slash,
    text_of,
    wait_answer,
)
from tests.reliability.test_acknowledged_work import ready

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HELD_FOR = 6  # the Retry-After the audit channel answers, seconds
ANSWER_WITHIN = 3.0  # seconds from the click to the person's answer, at most
NOT_YET = "have not all gone out yet"  # what the answer says of the posts still going
SLACK_AUDIT = "C0AUDIT"
DISCORD_CHANNEL = "200000000000000001"
DISCORD_AUDIT = "200000000000000009"
GUILD = "400000000000000001"
ANCHOR = "queuebot audit anchor"


def warm_up(c: Cluster, url: str) -> None:
    """One command answered first: the first request a serve takes opens its database
    connections and warms its caches, which is no part of what is measured."""
    d = slash(c.fake, "pending", user=SLACK_BOB, tag=new_tag("warm"))
    assert send(url, d).status_code == 200
    wait_answer(c.fake, d, timeout=30)


def test_a_slack_approval_is_answered_while_the_audit_channel_is_rate_limited(
    tmp_path: Path, figures: Figures
) -> None:
    toml = f'\n[channels.audit]\nslack = "{SLACK_AUDIT}"\n'
    with cluster(tmp_path, toml=toml) as c:
        [number] = request_redrives(c, [("rel-first", add_dead_letters(c, count=5, error="x"))])
        served = c.start()
        warm_up(c, served.url)
        c.fake.hold(SLACK_AUDIT, retry_after=HELD_FOR)
        d = click(c.fake, f"cr:approve:{number}", user=SLACK_BOB, tag=new_tag("first"))
        clicked = time.monotonic()
        assert send(served.url, d).status_code == 200
        answer = wait_answer(c.fake, d, timeout=60)
        answered = answer.at - clicked
        held = [
            call
            for call in c.fake.recorded("/api/chat.postMessage")
            if call.body.get("channel") == SLACK_AUDIT
        ]
        posted_before_answer = [call for call in held if "#429" not in call.path]
        c.fake.release(SLACK_AUDIT)
        released = time.monotonic()
        anchors = c.fake.wait_for(
            lambda call: (
                call.path == "/api/chat.postMessage"
                and call.body.get("channel") == SLACK_AUDIT
                and ANCHOR in str(call.body.get("text"))
            ),
            timeout=HELD_FOR + 20,
        )
        time.sleep(1.0)  # a second copy, if one were coming, would be here by now
        facts = {
            "Retry-After of the audit channel (s)": HELD_FOR,
            "click to the approver's answer (s)": round(answered, 2),
            "429s the audit channel answered before the answer": len(held),
            "audit posts taken before the answer": len(posted_before_answer),
            "release to the audit post (s)": round(anchors[0].at - released, 2),
            "audit anchor posts": len(
                [
                    call
                    for call in c.fake.recorded("/api/chat.postMessage")
                    if call.path == "/api/chat.postMessage"  # taken, not answered 429
                    and call.body.get("channel") == SLACK_AUDIT
                    and ANCHOR in str(call.body.get("text"))
                ]
            ),
            "answers": len(answers(c.fake, d)),
            "executions": executions(c, number),
        }
        text = text_of(answer)
    stored = figures.record("answers first: Slack approval, audit channel 429", facts)
    assert stored["click to the approver's answer (s)"] < ANSWER_WITHIN, stored
    assert "approved by bob and executed" in text, text
    assert NOT_YET in text, text  # it says the post is not there yet, and nothing more
    assert stored["audit posts taken before the answer"] == 0
    assert stored["audit anchor posts"] == 1  # kept, paced, then posted once
    assert stored["answers"] == 1 and stored["executions"] == 1


def test_a_discord_approval_is_answered_while_the_audit_channel_is_rate_limited(
    tmp_path: Path, figures: Figures
) -> None:
    toml = f'\n[discord]\nguild = "{GUILD}"\n\n[channels.audit]\ndiscord = "{DISCORD_AUDIT}"\n'
    with FakeDiscord().start() as discord:
        env = {"DISCORD_BOT_TOKEN": DEFAULT_TOKEN, "DISCORD_API_BASE_URL": discord.api_url}
        with cluster(tmp_path, toml=toml, env=env) as c:
            [number] = request_redrives(
                c, [("rel-first-d", add_dead_letters(c, count=5, error="x"))]
            )
            served = c.start()
            ready(c, served, discord)
            warm_up(c, served.url)
            discord.hold(DISCORD_AUDIT, retry_after=HELD_FOR)
            message = discord.posted_earlier(
                DISCORD_CHANNEL, f"CR-{number}", [f"cr:approve:{number}", f"cr:reject:{number}"]
            )
            i = discord.click(f"cr:approve:{number}", message_id=message.id, user=DISCORD_BOB)
            discord.wait_until(lambda: message.edits > 0, 60)
            rewritten = next(
                call
                for call in discord.webhook_calls(i)
                if call.method == "PATCH" and call.status == 200
            )
            answered = rewritten.at - i.delivered_at
            audit_posts = [
                call
                for call in discord.rest("POST", f"/channels/{DISCORD_AUDIT}/messages")
                if call.status != 429
            ]
            refused = [
                call
                for call in discord.rest("POST", f"/channels/{DISCORD_AUDIT}/messages")
                if call.status == 429
            ]
            discord.release(DISCORD_AUDIT)
            released = time.monotonic()
            discord.wait_until(
                lambda: any(ANCHOR in m.content for m in discord.channel_messages(DISCORD_AUDIT)),
                HELD_FOR * 2 + 20,
            )
            posted = [m for m in discord.channel_messages(DISCORD_AUDIT) if ANCHOR in m.content]
            arrived = time.monotonic() - released
            time.sleep(1.0)
            facts = {
                "Retry-After of the audit channel (s)": HELD_FOR,
                "click to the approver's answer (s)": round(answered, 2),
                "429s the audit channel answered before the answer": len(refused),
                "audit posts taken before the answer": len(audit_posts),
                "release to the audit post (s), at most": round(arrived, 2),
                "audit anchor posts": len(
                    [m for m in discord.channel_messages(DISCORD_AUDIT) if ANCHOR in m.content]
                ),
                "executions": executions(c, number),
            }
            text = message.text()
    stored = figures.record("answers first: Discord approval, audit channel 429", facts)
    assert posted
    assert stored["click to the approver's answer (s)"] < ANSWER_WITHIN, stored
    assert "approved by bob and executed" in text, text
    assert NOT_YET in text, text
    assert stored["audit posts taken before the answer"] == 0
    assert stored["audit anchor posts"] == 1
    assert stored["executions"] == 1
