"""The validation queuebot measures for a redrive: the jobs redriven under the incident
succeeded (``redriven-succeeded``), the dead letters fell to the alert's threshold or by
what was redriven (``dead-letters-low``), no dead letter arrived since the first redrive
but re-deaths of queuebot's own (``dead-letters-not-growing``); and the backlog, drained
or back to where it stood before the incident put rows back (``backlog-falling``). The
shipped failed-jobs and dead-letter runbooks name them, so the journey validates and its
postmortem says a measured recovery time."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.errors import Conflict
from tests.helpers.people import DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import AlertBot, alert_bot
from tests.integration.incident_journey import (
    DECLARE,
    PEOPLE,
    counted_before,
    the_journey,
    to_the_halt,
    validation,
)
from tests.integration.incident_support import ACTORS, say

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

DLQ_REDRIVE = "gd:dlq-redrive"


async def validated(bot: AlertBot) -> dict[str, str]:
    await say(bot, "/incident validate INC-1")
    return validation(await say(bot, "/incident export INC-1"))


async def test_after_the_journey_the_failed_jobs_items_are_measured_and_recovery_is_timed(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await the_journey(bot)
        items = await validated(bot)
        assert "- [x] v1 the failed rows needing a person" in items["v1"]
        assert "measured by queuebot" in items["v1"]
        assert (
            "the last count before INC-1 was declared: down 3, at least the 3 job(s) "
            "redriven under it" in items["v1"]
        )
        assert "- [x] v2" in items["v2"]
        assert "29 pending now, as before INC-1 first put rows back" in items["v2"]
        assert "- [x] v3 no requeued row comes back failed" in items["v3"]
        assert (
            "3 job(s) redriven under INC-1 (P-1, P-2): 3 succeeded, none dead again now"
            in items["v3"]
        )
        assert "INC-1 resolved" in await say(bot, "/incident resolve")
        export = await say(bot, "/incident export INC-1")
        assert "(the last validation item passed)" in export
        assert "- From the declaration to recovery (validated): " in export
        assert "not measured" not in export


async def test_after_the_halt_the_redriven_jobs_are_measured_failing(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await to_the_halt(bot)
        items = await validated(bot)
        assert "- [ ] v3" in items["v3"]
        assert "2 job(s) redriven under INC-1 (P-1): 0 succeeded, 2 dead again now" in items["v3"]
        assert "- [ ] v1" in items["v1"] and "not down by as many" in items["v1"]
        with pytest.raises(Conflict, match="measured v3 failing"):
            await say(bot, '/incident step v3 done --result "it looks fine"')


async def test_the_dead_letter_runbook_does_not_count_queuebots_own_re_deaths_as_growth(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await to_the_halt(bot, DLQ_REDRIVE)
        items = await validated(bot)
        assert "- [ ] v1 the redriven jobs reach success" in items["v1"]
        assert "2 dead again now" in items["v1"]
        assert "- [x] v3 the dead letters do not grow again" in items["v3"]
        assert "jobs queuebot redrove (P-1) that died again: not counted as growth" in (items["v3"])


async def test_a_dead_letter_queuebot_never_redrove_is_growth(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await to_the_halt(bot, DLQ_REDRIVE)
        bot.clock.advance(seconds=30)
        await die(bot)  # a message of the standing backlog dies, as the estate records it
        items = await validated(bot)
        assert "- [ ] v3 the dead letters do not grow again" in items["v3"]
        assert "since INC-1 first put rows back" in items["v3"]
        assert "1 of them counted as growth" in items["v3"]


async def die(bot: AlertBot) -> None:
    """One pending message of clips dies, with the DLQ event the estate writes."""
    async with bot.app.estate.engine.begin() as conn:
        message, job = (
            await conn.execute(
                sa.text(
                    "SELECT id, job_id FROM queue_messages WHERE status = 'PENDING' "
                    "ORDER BY id LIMIT 1"
                )
            )
        ).one()
        await conn.execute(
            sa.text("UPDATE queue_messages SET status = 'DLQ', last_error = 'oom' WHERE id = :m"),
            {"m": message},
        )
        await conn.execute(
            sa.text(
                "INSERT INTO job_events (id, aggregate_id, event_type, message, created_at) "
                "VALUES (:id, :job, 'DLQ', 'Message moved to DLQ after 3 attempts', :at)"
            ),
            {"id": str(uuid.uuid4()), "job": job, "at": bot.clock.now},
        )


async def test_nothing_redriven_is_not_measured_and_a_standing_backlog_must_fall(
    db_url: str, tmp_path: Path
) -> None:
    """Without a redrive under it there is nothing to judge the redrive items by; clips'
    standing backlog (29 rows nobody works) holding flat is not a backlog falling."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await counted_before(bot)
        await say(bot, DECLARE)
        for _ in range(6):
            bot.clock.advance(minutes=1)
            await bot.app.scheduler.run_due()
        items = await validated(bot)
        assert "- [ ] v2" in items["v2"] and "29 now: flat" in items["v2"]
        assert "nothing was redriven under INC-1 yet" in items["v3"]
        assert "nothing was redriven under INC-1 yet" in items["v1"]


async def test_the_failed_rows_are_held_to_the_alerts_threshold(
    db_url: str, tmp_path: Path
) -> None:
    """On a queue that keeps failure reasons, the failed-jobs item compares the failed
    rows with an actionable reason against the FailedJobsAccumulating alert's threshold."""
    threshold = "\n[alerts.detectors.failed_actionable]\nthreshold = 2\n"
    people = DORA_TOML + ACTORS + DUTY_OFFICER_TOML + threshold
    async with alert_bot(db_url, tmp_path, extra=people) as bot:
        await say(bot, '/incident declare gd:failed-jobs-accumulating "rows fail" --queue workers')
        items = await validated(bot)
        assert "- [ ] v1" in items["v1"]
        assert (
            "failed row(s) with an actionable reason now, above the alert's threshold of 2"
            in (items["v1"])
        )
        async with bot.app.estate.engine.begin() as conn:  # the team requeues and fixes
            await conn.execute(
                sa.text("UPDATE dev_r_worker_queue SET status = 'done' WHERE status = 'failed'")
            )
        items = await validated(bot)
        assert "- [x] v1" in items["v1"]
        assert (
            "0 failed row(s) with an actionable reason now, at or below the alert's "
            in (items["v1"])
        )


async def test_a_drained_backlog_passes(db_url: str, tmp_path: Path) -> None:
    """Nothing pending now and nothing five minutes ago is drained, not "flat"."""
    async with alert_bot(db_url, tmp_path, extra=DORA_TOML + ACTORS + DUTY_OFFICER_TOML) as bot:
        async with bot.app.estate.engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE dev_r_worker_queue SET status = 'done' WHERE status = 'queued'")
            )
        await counted_before(bot)
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        for _ in range(6):
            bot.clock.advance(minutes=1)
            await bot.app.scheduler.run_due()
        items = await validated(bot)
        assert "- [x] v3" in items["v3"]
        assert "0 pending now: drained" in items["v3"]
