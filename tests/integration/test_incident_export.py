"""The postmortem (/incident export) as its readers see it: every change made to the
incident's queue while it was open, by a person (change requests) or by housekeeping (its
own audited runs); an incident exported after it is resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.errors import UsageError
from tests.integration.alerting import alert_bot
from tests.integration.incident_support import ACTORS, DORA_APPROVER, DUTY_OFFICER, say

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

PEOPLE = DORA_APPROVER + ACTORS + DUTY_OFFICER


def section(export: str, heading: str) -> str:
    return export.split(heading, 1)[1].split("\n## ", 1)[0]


async def test_the_export_lists_housekeeping_changes_on_its_queue_during_it(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        bot.clock.advance(minutes=1)
        ran = await say(bot, "/queue housekeep")
        assert "queue workers (worker_queue): 24 row(s)" in ran
        changes = section(
            await say(bot, "/incident export INC-1"), "## Changes made under this incident"
        )
        assert "None." not in changes
        assert "Housekeeping changed 24 row(s) of workers during INC-1" in changes
        assert "| 2026-11-30 03:01:00 UTC | A | cancelled as duplicates | 2 | 169, 170 |" in changes
        assert "| B | retired to failed_permanently | 2 | 187, 188 |" in changes
        assert "No change request was made under it." in changes


async def test_housekeeping_outside_the_incident_or_on_another_queue_is_not_listed(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, "/queue housekeep")  # before the incident
        bot.clock.advance(minutes=1)
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue clips')
        changes = section(
            await say(bot, "/incident export INC-1"), "## Changes made under this incident"
        )
        assert "Housekeeping changed no row of clips during INC-1." in changes


async def test_a_resolved_incident_is_exported_by_name_or_as_the_channels_newest(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(
            bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers', channel="C0OPS"
        )
        for item in ("v1", "v2", "v3"):
            await say(bot, f'/incident step {item} done --result "seen"')
        assert "INC-1 resolved" in await say(bot, "/incident resolve")

        named = await say(bot, "/incident export INC-1")
        assert "# INC-1: jobs stopped" in named and "- Resolved: 2026-11-30" in named
        assert await say(bot, "/incident export", channel="C0OPS") == named
        with pytest.raises(UsageError) as elsewhere:
            await say(bot, "/incident export", channel="C0OTHER")
        said = str(elsewhere.value)
        assert "no incident is open" in said and "/incident export INC-N" in said
        assert "INC-1" in said  # the newest, to name
