"""/incident validate on the queue-loss runbook: the count written down before the fault
against now, a synthetic job submitted through the configured statement and watched until
it finishes, and the backlog; resolve needs them all."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from commands.context import Invocation
from commands.reply import Reply
from services import housekeeping_jobs as jobs
from services.errors import Conflict
from tests.integration.alerting import AlertBot, alert_bot

pytestmark = pytest.mark.usefixtures("db_url")

PEOPLE = """
[people.dora]
slack = "U0DORA"
roles = ["duty-officer", "operator"]
[roles]
"operations duty officer" = "duty-officer"
[incidents.synthetic_job]
queue = "workers"
insert = '''INSERT INTO dev_r_worker_queue (job_type, status, analyst_notes)
            VALUES ('synthetic', 'queued', :incident) RETURNING id'''
"""


async def say(bot: AlertBot, line: str) -> str:
    inv = Invocation(person=bot.app.directory.by_name("dora"), platform="console", account="dora")
    reply: Reply = await bot.app.router.handle_line(line, inv)
    return render_message(reply.message)


async def test_validation_measures_submits_and_watches_then_resolve(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await jobs.seed(bot.app.state_engine, estate=bot.app.estate, clock=bot.clock)
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
        # the backlog did not fall (nothing drains in this test): a person confirms it
        await say(bot, '/incident step v3 done --result "drained on the dashboard"')
        if (
            "pending"
            in (await say(bot, "/incident status"))
            .split("Validation")[1]
            .split("v1")[1]
            .split("\n")[0]
        ):
            await say(bot, '/incident step v1 done --result "counted by hand"')
        resolved = await say(bot, "/incident resolve")
        assert "INC-1 resolved" in resolved


def _row(status: str, step: str) -> str:
    return next(line for line in status.splitlines() if line.startswith(step + " "))
