"""Which open incident holds redrives on its queue: only one whose runbook says so
(``blocksRedrivesUntil``: the shipped queue-loss runbook, whose queue is being reloaded
from its durable record), and only until that restore step is marked done. The
dead-letter redrive runbook, whose own procedure is the redrive, and the failed-jobs
runbook (the FailedJobsAccumulating alert's) never hold one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.errors import ChecksFailed, NotFound, OutOfOrder
from tests.helpers.people import BOB_TOML, DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import AlertBot, alert_bot
from tests.integration.incident_support import ACTORS, say

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

PEOPLE = DORA_TOML + BOB_TOML + ACTORS + DUTY_OFFICER_TOML  # bob approves what dora asks
REDRIVE = '/queue redrive --error-like ffmpeg --sample 2 --reason "transcoder fixed"'


async def blocks(bot: AlertBot, number: int = 1) -> bool:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT blocks_redrive FROM qb_incidents WHERE id = :n"), {"n": number}
        )
        return bool(found.scalar_one())


@pytest.mark.parametrize("scenario", ["gd:dlq-redrive", "gd:failed-jobs-accumulating"])
async def test_an_open_redrive_or_failed_jobs_incident_lets_a_redrive_on_its_queue(
    db_url: str, tmp_path: Path, scenario: str
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, f'/incident declare {scenario} "dead letters to run again" --queue clips')
        asked = await say(bot, REDRIVE + " --incident INC-1")
        assert "CR-1: staged redrive of 14 dead letter(s) in queue clips" in asked
        assert "waiting for approval" in asked
        assert not await blocks(bot)
        status = await say(bot, "/incident status INC-1")
        assert "Redrives" not in status  # nothing to say: its runbook holds none


async def test_a_queue_loss_incident_holds_redrives_until_its_queue_is_restored(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, '/incident declare gd:queue-loss "the queue stopped" --queue clips')
        assert await blocks(bot)
        with pytest.raises(ChecksFailed) as refused:
            await say(bot, REDRIVE)
        said = str(refused.value)
        assert (
            "no open incident blocks redrives: INC-1 (gd:queue-loss) is restoring dep:job-queue: "
            "redrives on clips wait until its restore step 1 (dep:job-queue) is done; once "
            "it is restored, /incident step 1 done --incident INC-1"
        ) in said
        status = await say(bot, "/incident status INC-1")
        assert "Redrives: held until step 1 (dep:job-queue) is done" in status

        done = await say(bot, "/incident step 1 done")
        assert "Redrives: may run again (step 1, dep:job-queue, is done)" in done
        assert not await blocks(bot)
        timeline = await say(bot, "/incident timeline INC-1")
        assert "dora restored: dep:job-queue; redrives on clips may run again" in timeline

        asked = await say(bot, REDRIVE)
        assert "CR-1: staged redrive of 14 dead letter(s) in queue clips" in asked
        async with bot.app.state_engine.connect() as conn:
            details = (
                await conn.execute(
                    sa.text(
                        "SELECT details FROM qb_audit_events "
                        "WHERE action = 'incident.restore_done' AND subject = 'INC-1'"
                    )
                )
            ).scalar_one()
        said_then = json.loads(details) if isinstance(details, str) else details
        assert said_then["step"] == "dep:job-queue" and said_then["redrives_released"] is True


async def test_a_later_restore_step_leaves_the_hold_as_it_is(db_url: str, tmp_path: Path) -> None:
    """The queue-loss runbook holds redrives until step 1; a queue-loss incident on
    another queue holds none on clips."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, '/incident declare gd:queue-loss "the workers stopped" --queue workers')
        assert "staged redrive" in await say(bot, REDRIVE)  # clips: not the incident's queue
        await say(bot, "/incident step 1 done")
        await say(bot, "/incident step 2 done")
        assert not await blocks(bot)


async def test_a_step_is_named_by_its_number_as_status_shows_it(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say(bot, '/incident declare gd:queue-loss "the queue stopped" --queue workers')
        status = await say(bot, "/incident status")
        assert "1     dep:job-queue" in status and "2     dep:job-worker-pool" in status
        with pytest.raises(OutOfOrder, match="rests on dep:job-queue"):
            await say(bot, "/incident step 2 done")
        done = await say(bot, "/incident step 1 done")
        assert "1     dep:job-queue        done (dora)" in done
        done = await say(bot, "/incident step 2 done")
        assert "2     dep:job-worker-pool  done (dora)" in done
        with pytest.raises(NotFound) as unknown:
            await say(bot, "/incident step 3 done")
        assert (
            "INC-1 has no step '3'; its restore steps: 1 (dep:job-queue), "
            "2 (dep:job-worker-pool); its validation items: v1-v3"
        ) in str(unknown.value)
