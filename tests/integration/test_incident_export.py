"""The postmortem (/incident export) as its readers see it: every change made to the
incident's queue while it was open, by a person (change requests) or by housekeeping (its
own audited runs); an incident exported after it is resolved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from services.errors import UsageError
from tests.helpers.people import BOB_TOML, DORA_APPROVER_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import AlertBot, alert_bot
from tests.integration.incident_support import ACTORS, say, say_as, thread_posts

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

PEOPLE = DORA_APPROVER_TOML + ACTORS + DUTY_OFFICER_TOML


def section(export: str, heading: str) -> str:
    return export.split(heading, 1)[1].split("\n## ", 1)[0]


async def resolved_details(bot: AlertBot) -> dict[str, Any]:
    """The details of the trail's ``incident.resolved`` event."""
    async with bot.app.state_engine.connect() as conn:
        details = (
            await conn.execute(
                sa.text("SELECT details FROM qb_audit_events WHERE action = 'incident.resolved'")
            )
        ).scalar_one()
    found: dict[str, Any] = json.loads(details) if isinstance(details, str) else details
    return found


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


async def test_recovery_is_measured_to_the_validation_not_to_the_resolve(
    db_url: str, tmp_path: Path
) -> None:
    """Two items confirmed by hand at 03:03, the count measured restored at 03:07: the
    incident recovered (as far as anyone knows) at 03:07, 6 minutes after it was
    declared, whenever somebody clicked resolve afterwards."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()  # the count before the declaration
        bot.clock.advance(minutes=1)
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        bot.clock.advance(minutes=2)
        for item in ("v2", "v3"):
            await say(bot, f'/incident step {item} done --result "seen"')
        bot.clock.advance(minutes=4)
        await say(bot, "/incident validate")  # v1: the count is back, measured at 03:07
        bot.clock.advance(minutes=9)
        await say(bot, "/incident resolve")  # 03:16

        export = await say(bot, "/incident export INC-1")
        assert "- Resolved: 2026-11-30 03:16:00 UTC, by dora" in export
        assert "- Validated: 2026-11-30 03:07:00 UTC (the last validation item passed)" in export
        assert "- From the declaration to recovery (validated): 6 min" in export
        assert "to recovery: 15 min" not in export  # not to the resolve click
        (post,) = [p for p in await thread_posts(bot) if "resolved" in p]
        assert "INC-1 resolved by dora; recovered 6 min after the declaration" in post
        assert "(validated at 03:07:00 UTC)" in post
        said = await resolved_details(bot)
        assert said["fault_to_recovery_s"] == 360
        assert said["validated_at"] == "2026-11-30T03:07:00+00:00"


async def test_an_override_without_validation_claims_no_recovery_time(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + BOB_TOML) as bot:
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        bot.clock.advance(minutes=2)
        await say(bot, '/incident step v1 done --result "counted by hand"')
        bot.clock.advance(minutes=10)
        await say(bot, '/incident resolve --override --reason "drains on the dashboard"')
        await say_as(bot, "bob", "/queue approve CR-1")

        export = await say(bot, "/incident export INC-1")
        assert (
            "- From the declaration to recovery: not measured: resolved by override without "
            "validating v2, v3"
        ) in export
        assert "recovery: 12 min" not in export and "- Validated:" not in export
        said = await resolved_details(bot)
        assert said["fault_to_recovery_s"] is None and said["validated_at"] is None
