"""queuebot's own detectors raise alerts through the webhook's pipeline: the queue-loss
detector fires when jobs keep arriving and none finishes, stays quiet while a worker
finishes jobs, and resolves in the same thread once jobs finish again; dead-letter growth
likewise. Minutes pass on a controlled clock; the scheduler's sample job runs each one."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.alerting import AlertBot, alert_bot

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

DETECT = """
[alerts]
sample_seconds = 60
[alerts.detectors.queue_loss]
minutes = 5
[alerts.detectors.dead_letter_growth]
window_minutes = 5
min_increase = 3
"""


async def submit(bot: AlertBot, count: int) -> None:
    async with bot.app.estate.engine.begin() as conn:
        for n in range(count):
            await conn.execute(
                sa.text(
                    "INSERT INTO dev_r_worker_queue (issue_number, job_type, status, queued_at)"
                    " VALUES (:issue, 'implement-issue', 'queued', :at)"
                ),
                {"issue": 90_000 + n, "at": bot.clock.now},
            )


async def finish(bot: AlertBot, count: int, *, status: str = "done") -> None:
    """A worker finishes the oldest queued jobs."""
    reason = "'implementation_error'" if status == "failed" else "NULL"
    async with bot.app.estate.engine.begin() as conn:
        await conn.execute(
            sa.text(
                f"UPDATE dev_r_worker_queue SET status = :status, failure_reason = {reason} "
                "WHERE id IN (SELECT id FROM dev_r_worker_queue WHERE status = 'queued' "
                "ORDER BY id LIMIT :n)"
            ),
            {"status": status, "n": count},
        )


async def minute(bot: AlertBot) -> None:
    bot.clock.advance(minutes=1)
    await bot.app.scheduler.run_due()
    await bot.settle()


def alert_roots(bot: AlertBot, name: str) -> list[str]:
    return [str(c.body["blocks"]) for c in bot.roots() if name in str(c.body["blocks"])]


async def test_queue_loss_fires_when_nothing_finishes_and_resolves_when_work_finishes(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=DETECT) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()
        for _ in range(7):  # healthy: jobs arrive and a worker finishes them
            await submit(bot, 4)
            await finish(bot, 4)
            await minute(bot)
        assert alert_roots(bot, "QueueLoss") == []
        for _ in range(7):  # the worker stops; submissions go on
            await submit(bot, 4)
            await minute(bot)
        (root,) = alert_roots(bot, "QueueLoss")
        assert "FIRING: QueueLoss · queue workers" in root
        assert "accepted but none finishes" in root
        for _ in range(3):  # still broken: nothing more is posted
            await submit(bot, 4)
            await minute(bot)
        assert len(alert_roots(bot, "QueueLoss")) == 1
        await finish(bot, 40)  # the worker is back
        await minute(bot)
        (call,) = [c for c in bot.roots() if "QueueLoss" in str(c.body["blocks"])]
        (resolved,) = bot.replies(call)
        assert "All alerts of this group are resolved" in str(resolved.body["blocks"])
        assert "RESOLVED: QueueLoss" in str(bot.updates()[-1].body["blocks"])


async def test_dead_letter_growth_fires_over_its_window(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=DETECT) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()
        await submit(bot, 20)
        for _ in range(6):
            await minute(bot)
        assert alert_roots(bot, "DeadLettersGrowing") == []
        await finish(bot, 5, status="failed")
        await minute(bot)
        (root,) = alert_roots(bot, "DeadLettersGrowing")
        assert "Dead letters of workers are growing" in root


async def test_a_detector_turned_off_stays_silent(db_url: str, tmp_path: Path) -> None:
    off = DETECT.replace(
        "minutes = 5\n[alerts.detectors.dead",
        "minutes = 5\nenabled = false\n[alerts.detectors.dead",
        1,
    )
    async with alert_bot(db_url, tmp_path, extra=off) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()
        for _ in range(8):
            await submit(bot, 4)
            await minute(bot)
        assert alert_roots(bot, "QueueLoss") == []


async def test_failed_actionable_fires_after_its_window_with_the_triage(
    db_url: str, tmp_path: Path
) -> None:
    window = DETECT + "[alerts.detectors.failed_actionable]\nthreshold = 3\nminutes = 5\n"
    async with alert_bot(db_url, tmp_path, extra=window) as bot:
        await bot.app.scheduler.seed()
        await bot.app.scheduler.run_due()
        await submit(bot, 15)
        await finish(bot, 15, status="failed")  # 15 more with implementation_error
        for _ in range(4):  # above the threshold, but not for the whole window yet
            await minute(bot)
        assert alert_roots(bot, "FailedJobsAccumulating") == []
        for _ in range(2):
            await minute(bot)
        (root,) = alert_roots(bot, "FailedJobsAccumulating")
        assert "FIRING: FailedJobsAccumulating · queue workers" in root
        (call,) = [c for c in bot.roots() if "FailedJobsAccumulating" in str(c.body["blocks"])]
        (triage,) = bot.replies(call)
        assert "Triage: queue workers (worker_queue)" in str(triage.body["blocks"])
        async with bot.app.estate.engine.begin() as conn:  # fixed with SQL
            await conn.execute(
                sa.text(
                    "UPDATE dev_r_worker_queue SET status = 'cancelled' WHERE status = 'failed'"
                )
            )
        await minute(bot)
        assert "All alerts of this group are resolved" in str(bot.replies(call)[-1].body["blocks"])
