"""Work acknowledged long ago by a process that died is answered where the person still
reads: a real `queuebot serve` finds the orphaned deliveries in the ledger and, with
Slack's response_url (30 minutes) and Discord's token (15 minutes) past their life,
answers in the channel, mentioning the person. What was only for them is not shown to
everyone; what a change did is."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from services.db import create_engine
from services.db.tables import Delivery
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import FakeSlack
from tests.e2e.serving import demo_database, running_serve
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.people import DISCORD_BOB
from tests.helpers.platforms import discord_env, slack_env

GUILD = "400000000000000001"
DISCORD_CHANNEL = "200000000000000001"


@contextlib.contextmanager
def chat_on_demo(kind: str, workdir: Path) -> Iterator[tuple[str, FakeSlack, FakeDiscord]]:
    """A demo database (``kind``: sqlite or postgres), the fake Slack and the fake Discord."""
    with (
        demo_database(kind, workdir) as db_url,
        FakeSlack().start() as slack,
        FakeDiscord().start() as discord,
    ):
        yield db_url, slack, discord


def orphans(db_url: str, rows: list[dict[str, Any]]) -> None:
    """Ledger rows as a process leaves them when it dies long after its ack."""

    async def write() -> None:
        engine = create_engine(db_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.insert(Delivery.__table__), rows)
        finally:
            await engine.dispose()

    asyncio.run(write())


def row(
    key: str,
    request: dict[str, Any],
    *,
    state: str,
    outcome: str | None = None,
    ago: timedelta = timedelta(minutes=40),
    adoptions: int = 0,
) -> Any:
    """A ledger row acknowledged ``ago`` (its owner dead since), adopted ``adoptions``
    times before."""
    long_ago = datetime.now(UTC) - ago
    return {
        "key": key,
        "seen_at": long_ago,
        "state": state,
        "owner": "dead-host:1:abcdef/00000000",
        "done_at": long_ago if state == "done" else None,
        "request": request | {"acked_at": long_ago.isoformat()},
        "outcome": outcome,
        "adoptions": adoptions,
    }


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_orphans_past_the_platforms_answer_window_are_answered_in_the_channel(
    kind: str, tmp_path: Path
) -> None:
    with chat_on_demo(kind, tmp_path) as (db_url, slack, discord):
        slack_request = {
            "platform": "slack",
            "where": "Slack /queue",
            "user": "U0BOB",
            "channel": "C0OPS",
            "thread": None,
            "response_url": slack.response_url("expired"),
            "action_id": "",
        }
        orphans(
            db_url,
            [
                row(
                    "slack:command:late-read",
                    slack_request | {"group": "queue", "text": "triage workers"},
                    state="claimed",
                ),
                row(
                    "slack:command:late-change",
                    slack_request | {"group": "queue", "text": "approve CR-7"},
                    state="done",
                    outcome="CR-7 approved and executed",
                ),
                row(
                    "discord:interaction:900000000000000001",
                    {
                        "platform": "discord",
                        "where": "Discord /queue triage",
                        "user": DISCORD_BOB,
                        "channel": DISCORD_CHANNEL,
                        "application_id": "300000000000000001",
                        "token": "itoken-long-dead",
                        "group": "queue",
                        "name": "triage",
                        "values": {"queue": "workers"},
                        "action_id": "",
                    },
                    state="done",
                    outcome="CR-8 requested",
                ),
            ],
        )
        env = slack_env(slack) | discord_env(discord)
        extra = f'\n[discord]\nguild = "{GUILD}"\n' + DETECTORS_OFF  # no alert posts here
        with running_serve(tmp_path, db_url, env, extra=extra):
            posts = slack.wait_for(
                lambda c: c.path == "/api/chat.postMessage" and c.body.get("channel") == "C0OPS",
                count=2,
            )
            said = {json.dumps(c.body) for c in posts}
            discord.wait_until(lambda: len(discord.channel_messages(DISCORD_CHANNEL)) >= 1, 30)
            in_discord = [m.content for m in discord.channel_messages(DISCORD_CHANNEL)]
        assert slack.recorded("/response/") == []  # a dead response_url is not tried
        assert all(c.body["channel"] == "C0OPS" and "<@U0BOB>" in c.body["text"] for c in posts)
        read = next(s for s in said if "triage" not in s and "ask again" in s)
        assert "Slack stopped taking answers" in read  # the read's rows stay private
        change = next(s for s in said if "CR-7 approved and executed" in s)
        assert "Done before a restart" in change and "approve CR-7" in change
        (mention,) = in_discord
        assert mention.startswith(f"<@{DISCORD_BOB}>") and "CR-8 requested" in mention
