"""``GET /metrics`` of the app ``queuebot serve`` runs, on SQLite and PostgreSQL: what it
reads from queuebot's own database. People redrive dead letters in a staged plan, halt
it, declare an incident and let a deadline pass, as they would in chat; each series then
shows what they did: plans by state, the active plan's wave and jobs, the jobs redriven
and halts over all plans, the open incident and its missed communication, the outbox
backlog and how late the scheduler is. A reading that fails keeps the last values and
says so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bot.bootstrap import App, build_app
from bot.boundary import answer
from bot.demo import DEMO_CONFIG
from bot.http import build_http_app
from bot.render_text import render_message
from commands.context import Invocation
from commands.reply import Reply
from services import scheduler
from services.changes.model import RequestState
from services.config import load_config
from services.plans.model import ACTIVE, REDRIVEN_STATES, ItemState, PlanState
from services.reads import samples
from services.reads.own_gauges import (
    ACTIVE_PLAN_STATES,
    OBLIGATION_STATES,
    PLAN_JOB_STATES,
    PLAN_STATES,
    REDRIVEN_JOB_STATES,
)
from tests.integration.support import START
from tests.integration.test_metrics import Labels, of, series

CONFIG_TAIL = "\n[metrics]\nrefresh_seconds = 60\n"
REDRIVE = '/queue redrive --queue clips --error-like ffmpeg --sample 2 --reason "OOM fix deployed"'
DEMO_FFMPEG_DEAD = 14  # the demo's ffmpeg dead letters in clips


@dataclass
class Desk:
    app: App
    client: httpx.AsyncClient
    now: list[datetime]  # queuebot's clock, moved by the test
    mono: list[float]  # the monotonic clock the metrics read

    async def scrape(self) -> dict[tuple[str, Labels], float]:
        """A scrape after the reading interval: what the database holds now."""
        self.mono[0] += 60
        response = await self.client.get("/metrics")
        assert response.status_code == 200
        return series(response.text)

    def advance(self, seconds: float) -> None:
        self.now[0] += timedelta(seconds=seconds)

    async def say(self, person: str, line: str) -> str:
        who = self.app.directory.by_account("slack", f"U0{person.upper()}")
        inv = Invocation(person=who, platform="slack", account=f"U0{person.upper()}")
        reply = await answer(self.app.router.handle_line(line, inv), correlation_id="t", where="t")
        assert isinstance(reply, Reply)
        text = render_message(reply.message)
        assert not reply.error, text
        return text

    async def undone_outbox(self) -> int:
        async with self.app.state_engine.connect() as conn:
            query = "SELECT count(*) FROM qb_outbox WHERE done_at IS NULL"
            return int((await conn.execute(sa.text(query))).scalar_one())


@pytest.fixture
async def desk(demo_db_url: str, tmp_path: Path) -> AsyncIterator[Desk]:
    path = tmp_path / "queuebot.toml"
    path.write_text(DEMO_CONFIG.format(config=path) + CONFIG_TAIL)
    config = load_config(path, environ={"QUEUEBOT_DATABASE_URL": demo_db_url})
    now = [START]
    app = await build_app(config, clock=lambda: now[0], announce=False)
    mono = [1000.0]
    app.metrics.monotonic = lambda: mono[0]
    app.metrics.scrape_wait = 30.0  # a due read on a test database ends well within this
    try:
        async with app.state_engine.begin() as conn:  # flat dead letters 15 minutes ago
            profile = app.estate.profiles["clips"]
            await samples.record(conn, profile=profile, now=START - timedelta(minutes=15))
        transport = httpx.ASGITransport(app=build_http_app(app=app, slack=None))
        async with httpx.AsyncClient(transport=transport, base_url="http://queuebot") as client:
            yield Desk(app, client, now, mono)
    finally:
        await app.close()


def test_the_words_are_those_the_services_store() -> None:
    assert tuple(s.value for s in PlanState) == PLAN_STATES
    assert tuple(s.value for s in ACTIVE) == ACTIVE_PLAN_STATES
    assert tuple(s.value for s in ItemState) == PLAN_JOB_STATES
    assert tuple(s.value for s in REDRIVEN_STATES) == REDRIVEN_JOB_STATES
    assert {"pending", "met", "missed"} < set(OBLIGATION_STATES)  # as the incidents store


async def test_nothing_yet_reads_as_zero(desk: Desk) -> None:
    found = await desk.scrape()
    assert of(found, "queuebot_own_gauges_up") == {"": 1}
    assert of(found, "queuebot_own_gauges_age_seconds") == {"": 0}
    assert of(found, "queuebot_plans") == dict.fromkeys(PLAN_STATES, 0)
    assert of(found, "queuebot_plan_wave") == {}  # no active plan: no queue series
    assert of(found, "queuebot_plan_jobs_redriven_total") == {"": 0}
    assert of(found, "queuebot_plan_halts_total") == {"": 0}
    assert of(found, "queuebot_incidents_open") == {"true": 0, "false": 0}
    assert of(found, "queuebot_incident_obligations") == dict.fromkeys(OBLIGATION_STATES, 0)
    assert of(found, "queuebot_outbox_pending") == {"": 0}
    assert of(found, "queuebot_outbox_oldest_age_seconds") == {"": 0}
    assert of(found, "queuebot_scheduler_due") == {"": 0}
    assert of(found, "queuebot_scheduler_lag_seconds") == {"": 0}
    assert of(found, "queuebot_change_requests") == {s.value: 0 for s in RequestState}


async def test_a_plan_its_halt_an_incident_and_its_missed_deadline_show(desk: Desk) -> None:
    await desk.say("alice", REDRIVE)
    await desk.say("bob", "/queue approve CR-1")  # P-1 starts: the sample of 2 goes out
    desk.advance(90)  # nothing runs meanwhile: the plan's tick is due at +2 s
    found = await desk.scrape()

    assert of(found, "queuebot_plans") == {**dict.fromkeys(PLAN_STATES, 0), "running": 1}
    assert of(found, "queuebot_plan_wave") == {"clips": 0}  # the sample
    assert of(found, "queuebot_plan_waves") == {"clips": 3}  # 14 rows: 2, then 5, then 7
    assert of(found, "queuebot_plan_halted") == {"clips": 0}
    assert of(found, "queuebot_plan_jobs", queue="clips") == {
        **dict.fromkeys(PLAN_JOB_STATES, 0),
        "redriven": 2,
        "waiting": DEMO_FFMPEG_DEAD - 2,
    }
    assert of(found, "queuebot_plan_jobs_redriven_total") == {"": 2}
    assert of(found, "queuebot_plan_halts_total") == {"": 0}
    assert of(found, "queuebot_change_requests")["executed"] == 1
    assert of(found, "queuebot_outbox_pending") == {"": 0}  # no chat here: nothing to post
    # the plan's tick was due 2 s after the start: 88 s late now
    assert of(found, "queuebot_scheduler_due") == {"": 1}
    assert of(found, "queuebot_scheduler_lag_seconds") == {"": 88}

    await desk.say("alice", "/queue halt P-1 --reason looks-wrong")
    await desk.say("dora", '/incident declare gd:queue-loss "jobs stopped finishing" --queue clips')
    desk.advance(30)
    found = await desk.scrape()
    assert of(found, "queuebot_plans") == {**dict.fromkeys(PLAN_STATES, 0), "halted": 1}
    assert of(found, "queuebot_plan_halted") == {"clips": 1}
    assert of(found, "queuebot_plan_halts_total") == {"": 1}
    assert of(found, "queuebot_incidents_open") == {"true": 1, "false": 0}
    told = of(found, "queuebot_incident_obligations")
    assert told["pending"] == 2 and told["missed"] == told["overdue"] == told["met"] == 0
    # the declaration's post waits in the outbox for a chat platform, 30 s now
    assert await desk.undone_outbox() == 1
    assert of(found, "queuebot_outbox_pending") == {"": 1}
    assert of(found, "queuebot_outbox_oldest_age_seconds") == {"": 30}
    assert of(found, "queuebot_scheduler_lag_seconds") == {"": 118}  # the halted plan's tick

    desk.advance(6 * 60)  # past the operators' deadline (5 minutes), before the actors' (15)
    found = await desk.scrape()
    overdue = of(found, "queuebot_incident_obligations")
    assert overdue["overdue"] == 1 and overdue["missed"] == 0  # the timer has not run yet
    assert overdue["pending"] == told["pending"] - 1
    await desk.app.scheduler.run_due()  # it runs: the operators' communication is missed
    found = await desk.scrape()
    assert of(found, "queuebot_incident_obligations") == {
        "pending": told["pending"] - 1,
        "overdue": 0,
        "met": 0,
        "missed": 1,
    }
    assert of(found, "queuebot_scheduler_due") == {"": 0}
    assert of(found, "queuebot_scheduler_lag_seconds") == {"": 0}


async def test_news_only_a_console_session_can_print_is_no_stalled_chat_post(
    desk: Desk,
) -> None:
    """A plan asked for in a console session: its news waits for that session, for good
    once the session has ended. No chat platform is late with it: counted, it would hold
    the backlog's age growing and QueuebotChatDeliveryStalled firing."""
    for person, line in (("alice", REDRIVE), ("bob", "/queue approve CR-1")):
        inv = Invocation(
            person=desk.app.directory.by_name(person),
            platform="console",
            account=person,
            channel="tq0a1b.2c3",  # a console session that has ended since
        )
        reply = await answer(desk.app.router.handle_line(line, inv), correlation_id="t", where="t")
        assert isinstance(reply, Reply) and not reply.error, render_message(reply.message)
    desk.advance(20 * 60)
    found = await desk.scrape()
    assert await desk.undone_outbox() == 1  # the plan's start, for that session only
    assert of(found, "queuebot_outbox_pending") == {"": 0}
    assert of(found, "queuebot_outbox_oldest_age_seconds") == {"": 0}


async def test_an_item_no_handler_here_runs_is_not_scheduler_lag(desk: Desk) -> None:
    """An item of a kind this queuebot does not run (left by a configuration or version
    that did) is never taken here: counted, it would hold the lag growing for good and
    QueuebotSchedulerLagging firing."""
    assert "old.kind" not in desk.app.scheduler.handlers
    async with desk.app.state_engine.begin() as conn:
        at = desk.now[0] - timedelta(hours=3)
        await scheduler.schedule(conn, kind="old.kind", subject="x", due_at=at, created_at=at)
    found = await desk.scrape()
    assert of(found, "queuebot_scheduler_due") == {"": 0}
    assert of(found, "queuebot_scheduler_lag_seconds") == {"": 0}


async def test_the_totals_stay_when_a_plan_ends_and_another_starts(desk: Desk) -> None:
    await desk.say("alice", REDRIVE)
    await desk.say("bob", "/queue approve CR-1")
    await desk.say("alice", "/queue halt P-1")
    found = await desk.scrape()  # P-1 active: counted afresh
    assert of(found, "queuebot_plan_jobs_redriven_total") == {"": 2}

    await desk.say("alice", '/queue rollback P-1 --reason "fix did not hold"')
    await desk.say("bob", "/queue approve CR-2")  # the two go back to the dead letters
    found = await desk.scrape()  # P-1 ended: settled, and kept from now on
    assert of(found, "queuebot_plans")["rolled_back"] == 1
    assert of(found, "queuebot_plan_wave") == {}
    assert of(found, "queuebot_plan_jobs_redriven_total") == {"": 2}  # redriven, then returned
    assert of(found, "queuebot_plan_halts_total") == {"": 1}

    await desk.say("alice", REDRIVE)
    await desk.say("bob", "/queue approve CR-3")  # P-2: another sample of 2
    found = await desk.scrape()
    assert of(found, "queuebot_plans")["running"] == 1
    assert of(found, "queuebot_plan_jobs_redriven_total") == {"": 4}
    assert of(found, "queuebot_plan_halts_total") == {"": 1}
    assert of(found, "queuebot_plan_jobs", queue="clips")["redriven"] == 2


async def test_a_failed_reading_keeps_the_last_values_and_says_so(desk: Desk) -> None:
    await desk.say("alice", REDRIVE)
    found = await desk.scrape()
    assert of(found, "queuebot_change_requests")["pending"] == 1
    async with desk.app.state_engine.begin() as conn:
        await conn.exec_driver_sql("ALTER TABLE qb_outbox RENAME TO qb_outbox_away")
    found = await desk.scrape()  # still 200
    assert of(found, "queuebot_own_gauges_up") == {"": 0}
    assert of(found, "queuebot_own_gauges_age_seconds") == {"": 60}
    assert of(found, "queuebot_change_requests")["pending"] == 1  # the last good values
    assert of(found, "queuebot_queue_gauges_up") == {"clips": 1, "workers": 1}

    async with desk.app.state_engine.begin() as conn:
        await conn.exec_driver_sql("ALTER TABLE qb_outbox_away RENAME TO qb_outbox")
    found = await desk.scrape()
    assert of(found, "queuebot_own_gauges_up") == {"": 1}
    assert of(found, "queuebot_own_gauges_age_seconds") == {"": 0}
