"""The journey of an incident whose redrive halts, is resumed after the fix and finishes,
driven over ``alert_bot`` with the demo's simulated worker: dora declares and asks, bob
approves, the worker fails the "upstream timeout" jobs until the transcoder's fix is
deployed (``fix``)."""

from __future__ import annotations

import re

import sqlalchemy as sa

from services.estate.demo_worker import DemoWorker
from tests.helpers.people import BOB_TOML, DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import AlertBot
from tests.integration.incident_support import ACTORS, say, say_as

PEOPLE = DORA_TOML + BOB_TOML + ACTORS + DUTY_OFFICER_TOML  # bob approves what dora asks
FAILED_JOBS = "gd:failed-jobs-accumulating"
DECLARE = f'/incident declare {FAILED_JOBS} "clips die of upstream timeout" --queue clips'
REDRIVE = (
    '/queue redrive --error-like "upstream timeout" --sample 2 --reason "transcoder restarted" '
    "--incident INC-1"
)


async def plan_state(bot: AlertBot, number: int) -> str | None:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT state FROM qb_plans WHERE id = :n"), {"n": number}
        )
        state = found.scalar_one_or_none()
    return None if state is None else str(state)


async def run(bot: AlertBot, worker: DemoWorker, number: int, passes: int = 40) -> str | None:
    """The worker and the scheduler take turns, five seconds apart, until the plan stops
    running; its state then."""
    for _ in range(passes):
        await worker.step()
        bot.clock.advance(seconds=5)
        await bot.app.scheduler.run_due()
        state = await plan_state(bot, number)
        if state != "running":
            return state
    return await plan_state(bot, number)


async def counted_before(bot: AlertBot) -> None:
    """The queues' counts written down, then a minute on: the count before the fault."""
    await bot.app.scheduler.seed()
    await bot.app.scheduler.run_due()
    bot.clock.advance(minutes=1)


async def to_the_halt(bot: AlertBot, scenario: str = FAILED_JOBS) -> DemoWorker:
    """Declared, P-1 asked under INC-1 and approved: its sample dies again and halts it."""
    await counted_before(bot)
    await say(bot, DECLARE.replace(FAILED_JOBS, scenario))
    await say(bot, REDRIVE)
    await say_as(bot, "bob", "/queue approve CR-1")
    worker = DemoWorker(bot.app.estate, delay=0)
    assert await run(bot, worker, 1) == "halted"
    return worker


async def resumed_to_done(bot: AlertBot, worker: DemoWorker) -> str:
    """The fix deployed, P-1 resumed (CR-2, asked without naming the incident) and run to
    its end; the reply to the resume request."""
    worker.fixed.add("transcoder")
    bot.clock.advance(minutes=1)
    asked = await say(bot, '/queue resume P-1 --reason "transcoder fixed for real"')
    await say_as(bot, "bob", "/queue approve CR-2")
    assert await run(bot, worker, 1) == "completed"
    return asked


async def redriven_from_plan(bot: AlertBot, worker: DemoWorker, *, also: str = "") -> str:
    """What P-1 left dead again redriven (CR-3, P-2, asked without naming the incident
    unless ``also`` does) and run to its end; the reply to the request."""
    bot.clock.advance(minutes=1)
    asked = await say(
        bot, f'/queue redrive --from-plan P-1 --reason "the sample, after the fix"{also}'
    )
    await say_as(bot, "bob", "/queue approve CR-3")
    assert await run(bot, worker, 2) == "completed"
    return asked


async def the_journey(bot: AlertBot, scenario: str = FAILED_JOBS) -> DemoWorker:
    """Halted, resumed after the fix and done, and what died again redriven and done."""
    worker = await to_the_halt(bot, scenario)
    await resumed_to_done(bot, worker)
    await redriven_from_plan(bot, worker)
    return worker


def validation(export: str) -> dict[str, str]:
    """The postmortem's validation items, by number (v1, v2, ...): each item's line."""
    found: dict[str, str] = {}
    for line in export.split("## Validation", 1)[1].split("\n## ", 1)[0].splitlines():
        item = re.match(r"- \[.\] (v\d+) ", line)
        if item:
            found[item.group(1)] = line
    return found
