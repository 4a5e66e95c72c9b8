"""/incident validate on the queue-loss runbook: the count written down before the fault
against now, a synthetic job submitted through the configured statement and watched until
it finishes, and the backlog; resolve needs them all."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from services.errors import Conflict
from tests.helpers.people import BOB_TOML, DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import alert_bot
from tests.integration.incident_support import ACTORS, say, say_as

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

PEOPLE = (
    DORA_TOML
    + ACTORS
    + DUTY_OFFICER_TOML
    + """
[incidents.synthetic_job]
queue = "workers"
insert = '''INSERT INTO dev_r_worker_queue (job_type, status, analyst_notes)
            VALUES ('synthetic', 'queued', :incident) RETURNING id'''
"""
)


async def test_validation_measures_submits_and_watches_then_resolve(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()  # the count before the fault
        bot.clock.advance(minutes=1)
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        for _ in range(6):  # counts keep being written while the queue is repaired
            bot.clock.advance(minutes=1)
            await bot.app.scheduler.run_due()
        first = await say(bot, "/incident validate")
        assert "done (queuebot)" in _row(first, "v1")  # as many jobs as before the fault
        assert "submitted to workers" in _row(first, "v2")  # its synthetic job, sent
        assert "pending" in _row(first, "v3")  # the backlog is flat: not falling
        with pytest.raises(Conflict, match="not validated yet"):
            await say(bot, "/incident resolve")
        async with bot.app.estate.engine.begin() as conn:  # a worker takes it and finishes
            await conn.execute(
                sa.text(
                    "UPDATE dev_r_worker_queue SET status = 'done' WHERE job_type = 'synthetic'"
                )
            )
            submitted = (
                await conn.execute(
                    sa.text(
                        "SELECT analyst_notes FROM dev_r_worker_queue WHERE job_type = 'synthetic'"
                    )
                )
            ).scalar_one()
        assert submitted == "INC-1"  # the statement got the incident's name
        second = await say(bot, "/incident validate")
        assert ": done" in second and "done (queuebot)" in second
        status = await say(bot, "/incident status")
        assert "v1" in status and "v2" in status
        # the backlog did not fall (nothing drains in this test): queuebot measured it
        # failing, so one person's word does not confirm it (an override does: see below)
        with pytest.raises(Conflict, match="measured v3 failing"):
            await say(bot, '/incident step v3 done --result "drained on the dashboard"')
        with pytest.raises(Conflict, match="not validated yet: v3"):
            await say(bot, "/incident resolve")


def _row(status: str, step: str) -> str:
    return next(line for line in status.splitlines() if line.startswith(step + " "))


async def test_confirming_by_hand_an_item_measured_failing_needs_another_person(
    db_url: str, tmp_path: Path
) -> None:
    """/incident validate measured the backlog flat (failing); one person cannot confirm it
    by hand and resolve: the step is refused and points at the override, which bob
    approves; the postmortem marks what a person confirmed by hand."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + BOB_TOML) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()
        bot.clock.advance(minutes=1)
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        for _ in range(6):
            bot.clock.advance(minutes=1)
            await bot.app.scheduler.run_due()
        measured = await say(bot, "/incident validate")
        assert "flat" in _row(measured, "v3") and "pending" in _row(measured, "v3")

        with pytest.raises(Conflict, match="measured v3 failing") as refused:
            await say(bot, '/incident step v3 done --result "looks fine to me"')
        assert "--override" in str(refused.value) and "validate" in str(refused.value)
        assert "pending" in _row(await say(bot, "/incident status"), "v3")
        await say(bot, '/incident step v2 done --result "the job ran, seen in the UI"')
        with pytest.raises(Conflict, match="not validated yet"):
            await say(bot, "/incident resolve")

        await say(bot, '/incident resolve --override --reason "drained on the dashboard"')
        approved = await say_as(bot, "bob", "/queue approve CR-1")
        assert "INC-1 resolved" in approved
        export = await say(bot, "/incident export INC-1")
        v2 = next(line for line in export.splitlines() if "v2 " in line)
        assert "confirmed by hand by dora" in v2
        v1 = next(line for line in export.splitlines() if "v1 " in line)
        assert "measured by queuebot" in v1
        v3 = next(line for line in export.splitlines() if "v3 " in line)
        assert "overridden" in v3 and "by hand" not in v3
