"""Work whose process died every time it was carried out is given up, not run again: a
real `queuebot serve` finds orphans in the ledger that were adopted three times already
(each adoption followed a death), and answers each that it failed while being carried
out and was not retried, where the platform still takes answers (Slack's response_url,
else the channel mentioning the person; Discord's channel once its token is dead); it
logs each at error level and counts it in /metrics. One adopted twice is still run
again, and a change that had committed is still answered with what it did."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.db import create_engine
from testkit import web
from tests.e2e.serving import running_serve
from tests.e2e.test_late_answers import DISCORD_CHANNEL, GUILD, chat_on_demo, orphans, row
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.people import DISCORD_BOB
from tests.helpers.platforms import discord_env, slack_env

NOT_RETRIED = "this command failed while being carried out; it was not retried"
RECENT = timedelta(minutes=1)  # Slack still takes answers at the response_url


def ledger(db_url: str) -> dict[str, tuple[str, bool, int]]:
    """Each row's state, whether it was answered, and its adoptions."""

    async def read() -> dict[str, tuple[str, bool, int]]:
        engine = create_engine(db_url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    sa.text("SELECT key, state, answered_at, adoptions FROM qb_deliveries")
                )
                return {r.key: (r.state, r.answered_at is not None, r.adoptions) for r in rows}
        finally:
            await engine.dispose()

    return asyncio.run(read())


def given_up(metrics: str) -> dict[str, float]:
    prefix = "queuebot_deliveries_given_up_total{platform="
    return {
        line[len(prefix) + 1 : line.index('"}')]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith(prefix)
    }


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_orphans_adopted_three_times_are_answered_not_retried_and_never_run_again(
    kind: str, tmp_path: Path
) -> None:
    with chat_on_demo(kind, tmp_path) as (db_url, slack, discord):

        def slack_request(answer: str, text: str) -> dict[str, object]:
            return {
                "platform": "slack",
                "where": "Slack /queue",
                "user": "U0BOB",
                "channel": "C0OPS",
                "thread": None,
                "response_url": slack.response_url(answer),
                "action_id": "",
                "group": "queue",
                "text": text,
            }

        orphans(
            db_url,
            [
                row(
                    "slack:command:poison",
                    slack_request("poison", "triage --queue workers"),
                    state="claimed",
                    ago=RECENT,
                    adoptions=3,
                ),
                row(
                    "slack:command:poison-late",
                    slack_request("poison-late", "dlq --queue clips"),
                    state="claimed",
                    adoptions=3,
                ),
                row(
                    "slack:command:third-try",
                    slack_request("third-try", "triage --queue workers"),
                    state="claimed",
                    ago=RECENT,
                    adoptions=2,
                ),
                row(
                    "slack:command:committed",
                    slack_request("committed", "approve CR-7"),
                    state="done",
                    outcome="CR-7 approved and executed",
                    ago=RECENT,
                    adoptions=3,
                ),
                row(
                    "discord:interaction:900000000000000002",
                    {
                        "platform": "discord",
                        "where": "Discord /queue dlq",
                        "user": DISCORD_BOB,
                        "channel": DISCORD_CHANNEL,
                        "application_id": "300000000000000001",
                        "token": "itoken-long-dead",
                        "group": "queue",
                        "name": "dlq",
                        "values": {"queue": "clips"},
                        "action_id": "",
                    },
                    state="claimed",
                    adoptions=3,
                ),
            ],
        )
        env = slack_env(slack) | discord_env(discord)
        extra = f'\n[discord]\nguild = "{GUILD}"\n' + DETECTORS_OFF  # no alert posts here
        with running_serve(tmp_path, db_url, env, extra=extra) as served:
            answered = {
                name: json.dumps(
                    slack.wait_for(lambda c, n=name: c.path == f"/response/{n}")[0].body
                )
                for name in ("poison", "third-try", "committed")
            }
            (late,) = slack.wait_for(
                lambda c: c.path == "/api/chat.postMessage" and c.body.get("channel") == "C0OPS"
            )
            discord.wait_until(lambda: len(discord.channel_messages(DISCORD_CHANNEL)) >= 1, 30)
            (in_discord,) = [m.content for m in discord.channel_messages(DISCORD_CHANNEL)]
            counted = given_up(web.get(f"{served.url}/metrics", timeout=10).text)
            log = served.log.read_text()
        rows = ledger(db_url)

    poison = answered["poison"]
    assert NOT_RETRIED in poison and "/queue triage --queue workers" in poison, poison
    assert "slack:command:poison" in poison and "started 4 times" in poison, poison
    # past the response_url's life: in the channel, mentioning the person, never "ask
    # again to see it" (asking again would run it again)
    said = json.dumps(late.body)
    assert "<@U0BOB>" in late.body["text"] and NOT_RETRIED in said, said
    assert "/queue dlq --queue clips" in said and "slack:command:poison-late" in said, said
    assert "Slack stopped taking answers" not in said  # not "ask again to see it"
    assert in_discord.startswith(f"<@{DISCORD_BOB}>") and NOT_RETRIED in in_discord
    assert "/queue dlq queue:clips" in in_discord, in_discord
    assert "discord:interaction:900000000000000002" in in_discord, in_discord
    # adopted twice before: run once more, and answered as any read
    assert NOT_RETRIED not in answered["third-try"] and "workers" in answered["third-try"]
    # a change that had committed: said what it did, however often its process died
    committed = answered["committed"]
    assert "Done before a restart" in committed and "CR-7 approved and executed" in committed
    assert NOT_RETRIED not in committed

    assert counted == {"slack": 2, "discord": 1}
    gave_up = [line for line in log.splitlines() if " gave up " in line]
    assert len(gave_up) == 3 and all(" ERROR " in line for line in gave_up), log
    assert all("its process died 4 times while carrying it out" in line for line in gave_up)
    assert rows == {
        "slack:command:poison": ("done", True, 4),
        "slack:command:poison-late": ("done", True, 4),
        "slack:command:third-try": ("done", True, 3),
        "slack:command:committed": ("done", True, 4),
        "discord:interaction:900000000000000002": ("done", True, 4),
    }
