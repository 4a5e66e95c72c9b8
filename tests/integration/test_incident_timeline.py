"""The incident's timeline and its postmortem show every change in order, the plan's own
events included: its sample, the halt and its cause, the resume (who asked, who approved),
each wave, its completion with how many succeeded and died again, a rollback. A run of
clean waves is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from services.estate.demo_worker import DemoWorker
from tests.helpers.text import in_order
from tests.integration.alerting import AlertBot, alert_bot
from tests.integration.incident_journey import (
    DECLARE,
    PEOPLE,
    REDRIVE,
    resumed_to_done,
    run,
    to_the_halt,
)
from tests.integration.incident_support import say, say_as

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]


async def halt_reason(bot: AlertBot) -> str:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT reason FROM qb_audit_events WHERE action = 'plan.halted'")
        )
        return str(found.scalar_one()).removeprefix("HALTED: ")


async def test_the_timeline_follows_the_plan_through_its_halt_and_resume(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        worker = await to_the_halt(bot)
        await resumed_to_done(bot, worker)
        cause = await halt_reason(bot)
        assert "dead-letter" in cause
        expected = (
            "dora declared gd:failed-jobs-accumulating",
            "dora requested CR-1 (plan of 3 in clips): transcoder restarted",
            "bob approved CR-1",
            "CR-1 executed",
            "P-1 sample started: 2 job(s) redriven, of 3 in the plan",
            "P-1 sample finished: 0 succeeded, 2 died again",
            f"P-1 halted: {cause[:40]}",  # a chat table clips a long cell
            "dora requested CR-2 (resume of P-1): transcoder fixed for real",
            "bob approved CR-2",
            "CR-2 executed",
            "P-1 resumed on CR-2: asked by dora, approved by bob",
            "P-1 wave 1 started: 1 job(s) redriven",
            "P-1 wave 1 finished: 1 succeeded, 0 died again",
            "P-1 completed: 1 of 3 succeeded, 2 died again",
        )
        in_order(await say(bot, "/incident timeline INC-1"), *expected)
        export = await say(bot, "/incident export INC-1")
        timeline = export.split("## Timeline", 1)[1]
        in_order(timeline, *expected)
        assert f"| plan.halted | - | P-1 halted: {cause} |" in timeline
        assert "| plan.resumed | bob |" in timeline


async def test_a_rollback_is_on_the_timeline_with_who_asked_and_approved(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, DECLARE)
        await say(bot, REDRIVE)
        await say_as(bot, "bob", "/queue approve CR-1")
        bot.clock.advance(seconds=30)
        await say(bot, "/queue halt P-1 --reason looks-wrong")
        bot.clock.advance(seconds=30)
        await say(bot, '/queue rollback P-1 --reason "the fix did not hold"')
        await say_as(bot, "bob", "/queue approve CR-2")
        in_order(
            await say(bot, "/incident timeline INC-1"),
            "P-1 sample started: 2 job(s) redriven, of 3 in the plan",
            "P-1 halted by dora: looks-wrong",
            "dora requested CR-2 (rollback of P-1): the fix did not hold",
            "CR-2 executed",
            "P-1 rolled back on CR-2: asked by dora, approved by bob; 2 unclaimed job(s) "
            "returned to the dead letters",
        )


async def test_a_run_of_clean_waves_is_one_line(db_url: str, tmp_path: Path) -> None:
    small_waves = "\n[redrive]\nfirst_wave = 1\nmax_wave = 2\n"
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + small_waves) as bot:
        await say(bot, '/incident declare gd:dlq-redrive "ffmpeg ran out of memory" --queue clips')
        await say(
            bot,
            '/queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed" '
            "--incident INC-1",
        )
        await say_as(bot, "bob", "/queue approve CR-1")
        assert await run(bot, DemoWorker(bot.app.estate, delay=0), 1, passes=80) == "completed"
        timeline = await say(bot, "/incident timeline INC-1")
        in_order(
            timeline,
            "P-1 sample started: 2 job(s) redriven, of 14 in the plan",
            "P-1 sample finished: 2 succeeded, 0 died again",
            "P-1 waves 1-6 ran: 12 job(s) redriven, 12 succeeded, none died again",
            "P-1 completed: 14 of 14 succeeded, 0 died again",
        )
        assert "wave 3 started" not in timeline
