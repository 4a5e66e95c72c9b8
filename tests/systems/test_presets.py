"""queuebot on the real systems: one line of config (``preset``, ``queue_name``) reads a
system's own table, a staged redrive of its dead jobs goes through two-person approval,
the system's own worker runs them again with the fault fixed, and every redriven job ends
in the system's own success state while the jobs of its other queues are untouched.

The dead jobs are made by each system's own tools (Procrastinate's, pg-boss's and
graphile-worker's client and worker; River, Oban, GoodJob, Solid Queue and Que by a
stand-in that settles jobs as they do: testkit/systems/).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import Services
from commands.model import Dlq, Show
from commands.model import Triage as TriageCommand
from services.config import QueueConfig
from services.db import create_engine
from services.errors import ChecksFailed
from services.estate.estate import Estate
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.estate.registry import shipped_profiles
from services.plans.model import PlanState
from services.reads import samples
from testkit.systems import Made, System
from tests.conftest import _pg_conninfo, postgres_database
from tests.helpers.people import ALICE, BOB
from tests.helpers.replies import read_reply
from tests.helpers.systems import real_system
from tests.integration.support import Clock, RecordingNotifier, build_services
from tests.kinds import ChangeKind
from tests.systems.test_systems import STATES

QUEUES = {"emails": (2, 5), "reports": (1, 2)}
# The channel each system's workers listen on for new work (pg-boss 10 has none: it polls).
WAKES = {
    "procrastinate": "procrastinate_queue_v1#emails",
    "river": "public.river_insert",
    "oban": "public.oban_insert",
    "graphile-worker": "jobs:insert",
    "good_job": "good_job",
}


@dataclass
class World:
    name: str
    system: System
    url: str  # libpq
    made: Made
    engine: AsyncEngine
    estate: Estate
    clock: Clock
    services: Services

    async def reply(self, command: object) -> str:
        return await read_reply(self.estate, command)

    def states(self, ids: list[str]) -> set[str | None]:
        return set(self.system.state_of(self.url, ids).values())


# The systems queuebot has a preset for; a system of testkit/systems joins once its preset
# ships under the same name.
PRESETS = sorted(name for name in STATES if name in shipped_profiles().presets)


# Known to fail, and why; strict: the mark must go once the preset is fixed.
@pytest.fixture(params=PRESETS)
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    name: str = request.param
    system = real_system(name)
    for sa_url in postgres_database("migrated"):  # queuebot's tables beside the system's
        url = _pg_conninfo(sa_url)
        made = await asyncio.to_thread(system.build, url, queues=QUEUES)
        engine = create_engine(sa_url)
        clock = Clock(datetime.now(UTC))  # the systems write the real time
        config = QueueConfig(preset=name, queue_name="emails")
        estate = Estate(engine=engine, queues={"mail": config}, clock=clock)
        services = build_services(engine, estate, clock, RecordingNotifier())
        try:
            yield World(name, system, url, made, engine, estate, clock, services)
        finally:
            await engine.dispose()


@pytest.mark.postgres
async def test_a_staged_redrive_of_a_systems_dead_jobs_runs_them_again_in_its_own_worker(
    world: World,
) -> None:
    dead_state, ok_state = STATES[world.name]
    emails, reports = world.made.dead["emails"], world.made.dead["reports"]

    # Triage and /queue dlq read the system's table in its own words, one queue of it.
    said = await world.reply(TriageCommand(queue="mail"))
    assert f"dead letters: 5 (5 {dead_state})" in said
    listed = await world.reply(Dlq(queue="mail"))
    for job in emails:
        assert job in listed
    # which jobs it lists, by id (a text search for a small integer id would also find it
    # inside a count or a time of the reply)
    async with world.estate.connect() as conn:
        dead = await world.estate.profile("mail").dead(conn, filters=DeadFilter(limit=100))
    assert sorted(r.id for r in dead.rows) == sorted(emails)  # none of the other queue's
    shown = await world.reply(Show(queue="mail", job_id=emails[0]))
    assert dead_state in shown

    # The jobs died minutes ago, and the plan waits until they stop dying: the dead
    # letters must not have grown for 10 minutes.
    with pytest.raises(ChecksFailed, match="dead letters not growing"):
        await world.services.changes.request(
            kind=ChangeKind.PLAN,
            queue="mail",
            selector=Selector(all_dead=True),
            reason="the smtp relay answers again",
            actor=ALICE,
        )
    world.clock.advance(minutes=11)
    async with world.engine.begin() as conn:  # (where the system records no deaths)
        profile = world.estate.profile("mail")
        await samples.record(conn, profile=profile, now=world.clock.now - timedelta(minutes=10))

    listener = psycopg.connect(world.url, autocommit=True)
    wake = WAKES.get(world.name)
    if wake is not None:
        listener.execute(f'LISTEN "{wake}"')
    try:
        view = await world.services.changes.request(
            kind=ChangeKind.PLAN,
            queue="mail",
            selector=Selector(all_dead=True),
            reason="the smtp relay answers again",
            actor=ALICE,
        )
        assert view.eligible == 5
        decision = await world.services.changes.approve(number=view.number, actor=BOB)
        assert decision.executed and decision.view.result is not None
        plan = decision.view.result.plan
        assert plan is not None
        if wake is not None:  # the system's workers were woken when the change committed
            woken = list(listener.notifies(timeout=10, stop_after=1))
            assert woken and woken[0].channel == wake
            assert json.loads(woken[0].payload)
    finally:
        listener.close()

    for _ in range(10):  # its own worker runs the redriven jobs, the plan counts them
        await asyncio.to_thread(world.system.work, world.url, fault=False, timeout=30)
        world.clock.advance(seconds=5)
        await world.services.scheduler.run_due()
        shown_plan = await world.services.plans.view(number=plan)
        if shown_plan.state is PlanState.COMPLETED:
            break
    assert shown_plan.state is PlanState.COMPLETED and shown_plan.succeeded == 5
    assert world.states(emails) == {ok_state}
    assert world.states(reports) == {dead_state}  # the other queue of the table: untouched
    after = await world.reply(TriageCommand(queue="mail"))
    assert "dead letters: 0" in after
