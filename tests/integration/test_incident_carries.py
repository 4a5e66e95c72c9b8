"""An incident carries its redrive from declaration to postmortem: a request about a plan
(a resume, a rollback) belongs to the plan's incident without anyone naming it again, says
so in its preview, and is listed among the changes made under the incident."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.alerting import AlertBot, alert_bot
from tests.integration.incident_journey import (
    DECLARE,
    PEOPLE,
    REDRIVE,
    redriven_from_plan,
    resumed_to_done,
    to_the_halt,
)
from tests.integration.incident_support import say, say_as

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]


def section(export: str, heading: str) -> str:
    return export.split(heading, 1)[1].split("\n## ", 1)[0]


async def incidents_of_requests(bot: AlertBot) -> dict[int, str | None]:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(sa.text("SELECT id, incident FROM qb_change_requests"))
        return {int(n): incident for n, incident in found.all()}


async def audited_incidents(bot: AlertBot, subject: str) -> set[str | None]:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT incident FROM qb_audit_events WHERE subject = :s"), {"s": subject}
        )
        return set(found.scalars().all())


async def test_a_resume_belongs_to_the_plans_incident_and_says_so(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        worker = await to_the_halt(bot)
        asked = await resumed_to_done(bot, worker)
        assert "incident: INC-1 (from P-1)" in asked
        assert await incidents_of_requests(bot) == {1: "INC-1", 2: "INC-1"}
        assert await audited_incidents(bot, "CR-2") == {"INC-1"}

        changes = section(
            await say(bot, "/incident export INC-1"), "## Changes made under this incident"
        )
        assert "| CR-1 | plan | clips | dora | bob | executed | 3 |" in changes
        assert "| CR-2 | resume | clips | dora | bob | executed |" in changes


async def test_a_rollback_belongs_to_the_plans_incident(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, DECLARE)
        await say(bot, REDRIVE)
        await say_as(bot, "bob", "/queue approve CR-1")  # its sample is out, unclaimed
        await say(bot, "/queue halt P-1 --reason looks-wrong")
        asked = await say(bot, '/queue rollback P-1 --reason "the fix did not hold"')
        assert "CR-2: roll back plan P-1" in asked
        assert "incident: INC-1 (from P-1)" in asked
        await say_as(bot, "bob", "/queue approve CR-2")
        changes = section(
            await say(bot, "/incident export INC-1"), "## Changes made under this incident"
        )
        assert "| CR-2 | rollback | clips | dora | bob | executed |" in changes


async def test_a_plan_asked_without_an_incident_lends_none(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, DECLARE)
        await say(bot, REDRIVE.replace(" --incident INC-1", ""))
        await say_as(bot, "bob", "/queue approve CR-1")
        await say(bot, "/queue halt P-1 --reason looks-wrong")
        asked = await say(bot, '/queue resume P-1 --reason "false alarm"')
        assert "incident:" not in asked
        assert await incidents_of_requests(bot) == {1: None, 2: None}


async def test_a_redrive_from_a_plan_takes_the_plans_incident(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        worker = await to_the_halt(bot)
        await resumed_to_done(bot, worker)
        asked = await redriven_from_plan(bot, worker)
        assert "CR-3: staged redrive of 2 dead letter(s) in queue clips" in asked
        assert "incident: INC-1 (from P-1)" in asked
        async with bot.app.state_engine.connect() as conn:
            found = await conn.execute(sa.text("SELECT incident FROM qb_plans WHERE id = 2"))
            assert found.scalar_one() == "INC-1"
        changes = section(
            await say(bot, "/incident export INC-1"), "## Changes made under this incident"
        )
        assert "| CR-3 | plan | clips | dora | bob | executed | 2 |" in changes


async def test_an_incident_named_on_a_redrive_from_a_plan_is_kept(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        worker = await to_the_halt(bot)
        await resumed_to_done(bot, worker)
        await say(bot, '/incident declare gd:dlq-redrive "the sample to run again" --queue clips')
        asked = await redriven_from_plan(bot, worker, also=" --incident INC-2")
        assert "incident: INC-2" in asked and "(from P-1)" not in asked
        assert (await incidents_of_requests(bot))[3] == "INC-2"
        first = section(
            await say(bot, "/incident export INC-1"), "## Changes made under this incident"
        )
        assert "CR-3" not in first
