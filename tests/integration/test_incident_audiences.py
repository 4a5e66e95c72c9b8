"""An audience is told when its message is delivered to a channel people read: not when
queuebot queued it, and never where no channel carries it. A runbook audience with no
channel is refused at declaration (and by `config check`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.errors import ConfigError
from tests.helpers.people import DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import alert_bot
from tests.integration.incident_support import ACTORS, say

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

PEOPLE = DORA_TOML + DUTY_OFFICER_TOML


def state_of(status: str, audience: str) -> str:
    return next(line for line in status.splitlines() if line.startswith(audience + " "))


async def test_a_runbook_audience_with_no_channel_is_refused_at_declaration(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:  # no [channels.actors]
        with pytest.raises(ConfigError) as refused:
            await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        said = str(refused.value)
        assert "actors" in said and "[channels.actors]" in said and "operators" not in said
        async with bot.app.state_engine.connect() as conn:
            from sqlalchemy import text

            assert (await conn.execute(text("SELECT count(*) FROM qb_incidents"))).scalar() == 0


async def test_told_only_once_delivered(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + ACTORS) as bot:
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        bot.clock.advance(seconds=30)
        said = await say(bot, '/incident notify operators "we are on it"')
        assert "queued, not yet delivered" in said and "the operators are told" not in said
        assert "pending" in state_of(await say(bot, "/incident status"), "operators")

        bot.clock.advance(seconds=12)
        await bot.settle()  # the outbox delivers it to C0OPS
        assert any("we are on it" in str(c.body) for c in bot.posts("C0OPS"))
        row = state_of(await say(bot, "/incident status"), "operators")
        assert "met" in row and "42 s" in row  # from the declaration to the delivery
        timeline = await say(bot, "/incident timeline")
        assert "queued, not yet delivered" in timeline and "dora told the operators" in timeline


async def test_a_channel_gone_since_the_declaration_tells_nobody(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + ACTORS) as bot:
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
    async with alert_bot(db_url, tmp_path, extra=PEOPLE, build=False) as bot:
        with pytest.raises(ConfigError) as refused:
            await say(bot, '/incident notify actors "your jobs are safe" --incident INC-1')
        said = str(refused.value)
        assert "nobody was told" in said and "[channels.actors]" in said
        assert "pending" in state_of(await say(bot, "/incident status INC-1"), "actors")
        await bot.settle()
        assert not bot.posts("C0ACTORS")


async def test_a_channel_only_on_a_platform_not_configured_is_recorded_as_not_posted(
    db_url: str, tmp_path: Path
) -> None:
    discord_only = '\n[channels.actors]\ndiscord = "100000000000000099"\n'
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + discord_only) as bot:  # Slack only
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        said = await say(bot, '/incident notify actors "your jobs are safe"')
        assert "queued, not yet delivered" in said
        await bot.settle()
        assert "pending" in state_of(await say(bot, "/incident status"), "actors")
        async with bot.app.state_engine.connect() as conn:
            from sqlalchemy import text

            said_by_outbox = (
                await conn.execute(
                    text(
                        "SELECT last_error FROM qb_outbox "
                        "WHERE CAST(payload AS TEXT) LIKE '%your jobs are safe%'"
                    )
                )
            ).scalar_one()
        assert said_by_outbox == (
            "not posted: none of the audience's channels is on a configured chat platform"
        )


async def test_a_draft_ends_the_summary_before_what_follows_it(db_url: str, tmp_path: Path) -> None:
    """The failed-jobs runbook's draft follows the summary with where to start triage:
    the summary ends as a sentence, and the triage command stands on its own line."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(
            bot,
            '/incident declare gd:failed-jobs-accumulating "FailedJobsAccumulating on workers" '
            "--queue workers",
        )
        await say(bot, "/incident notify operators")
        await bot.settle()
        (post,) = bot.posts("C0OPS")
        said = post.body["blocks"][1]["text"]["text"]
        assert said == (
            "INC-1: failed jobs are accumulating in queue workers; dora leads the response. "
            "FailedJobsAccumulating on workers.\nTriage: /queue triage --queue workers"
        )
        # the notification's text says the incident once, as the draft does
        assert post.body["text"].startswith("INC-1: failed jobs are accumulating")
