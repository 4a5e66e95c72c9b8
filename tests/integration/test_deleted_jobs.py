"""A staged redrive whose jobs leave the table, on every preset: where the system deletes
only the jobs that succeeded (graphile-worker, Que) such a job succeeded and the plan goes
on; anywhere else its outcome is unknown, the plan counts it so and halts after the wave,
naming what may have deleted it and the setting that says such a job succeeded; with that
setting (``deleted_jobs = "succeeded"``) the plan counts it as succeeded and goes on.
PostgreSQL only (the systems are); the rule itself is tests/unit/test_deleted_jobs.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from bot.render_text import render_message
from services.estate.ops import Selector
from services.plans.messages import plan_message
from services.plans.model import PlanState, PlanView, WaveOutcome
from services.reads import samples
from tests.helpers.people import ALICE, BOB
from tests.integration.preset_adapters import PresetAdapter, ProcrastinateAdapter, RiverAdapter
from tests.integration.support import Clock
from tests.integration.test_presets import ADAPTERS, World, open_world
from tests.kinds import ChangeKind

pytestmark = pytest.mark.postgres
SAMPLE = 2  # of the 4 dead jobs each world has: the sample, then a wave of 2
FIXED = {"graphile-worker", "que"}  # they delete a job only when it succeeds


@pytest.fixture(params=ADAPTERS, ids=lambda a: a.profile_class.name)
async def world(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[World]:
    async for w in open_world(pg_url, request.param):
        yield w


async def started_plan(world: World) -> int:
    """A plan of every dead job, approved: its sample redriven."""
    async with world.engine.begin() as conn:  # the dead letters are not growing
        ago = _clock(world).now - timedelta(minutes=15)
        await samples.record(conn, profile=world.profile, now=ago)
    view = await world.services.changes.request(
        kind=ChangeKind.PLAN,
        queue="q",
        selector=Selector(all_dead=True, sample=SAMPLE),
        reason="the smtp relay answers again",
        actor=ALICE,
    )
    decision = await world.services.changes.approve(number=view.number, actor=BOB)
    assert decision.view.result is not None and decision.view.result.plan is not None
    return decision.view.result.plan


async def sample_leaves_the_table(world: World, plan: int) -> PlanView:
    """The sample's jobs are deleted (by a worker, a pruner) and the plan's tick looks."""
    async with world.engine.connect() as conn:
        sample = sorted(set(await world.adapter.waiting(conn)) & set(world.built.dead))
    assert len(sample) == SAMPLE
    async with world.engine.begin() as conn:
        for job in sample:
            await world.adapter.prune(conn, job)
    _clock(world).advance(seconds=5)
    await world.services.scheduler.run_due()
    return await world.services.plans.view(number=plan)


async def test_a_job_gone_from_the_table_succeeded_only_where_only_successes_are_deleted(
    world: World,
) -> None:
    plan = await started_plan(world)
    view = await sample_leaves_the_table(world, plan)
    shown = render_message(plan_message(view))
    name = world.profile.name
    if name in FIXED:  # a success: the next wave has started
        assert view.state is PlanState.RUNNING, shown
        assert (view.succeeded, view.unknown) == (SAMPLE, 0)
        assert [w.outcome for w in view.waves] == [WaveOutcome.OK, WaveOutcome.RUNNING]
        assert "outcome unknown" not in shown
        return
    assert view.state is PlanState.HALTED, shown
    assert (view.succeeded, view.redead, view.unknown) == (0, 0, SAMPLE)
    assert len(view.waves) == 1 and view.waves[0].outcome is WaveOutcome.HALTED
    assert (
        f"HALTED: {SAMPLE} of the sample's jobs left the table, and this queue's workers may "
        f"delete failed jobs ({world.profile.deleted_by.format(system=_system(world))}): "
        'their outcome is unknown; set deleted_jobs = "succeeded" if this queue\'s workers '
        "delete only jobs that succeeded. Nothing more is redriven."
    ) in shown
    assert f"{SAMPLE} left the table, outcome unknown" in shown  # the status line
    async with world.engine.connect() as conn:  # nothing more was redriven
        assert not set(await world.adapter.waiting(conn)) & set(world.built.dead)


@pytest.mark.parametrize(
    "kind", [ProcrastinateAdapter, RiverAdapter], ids=["procrastinate", "river"]
)
async def test_where_the_queue_says_deleted_jobs_succeeded_the_plan_counts_them_and_goes_on(
    pg_url: str, kind: type[PresetAdapter]
) -> None:
    async for w in open_world(pg_url, kind, deleted_jobs="succeeded"):
        plan = await started_plan(w)
        view = await sample_leaves_the_table(w, plan)
        assert view.state is PlanState.RUNNING, render_message(plan_message(view))
        assert (view.succeeded, view.unknown) == (SAMPLE, 0)
        assert [w.outcome for w in view.waves] == [WaveOutcome.OK, WaveOutcome.RUNNING]


def _clock(world: World) -> Clock:
    clock = world.services.plan_engine.clock
    assert isinstance(clock, Clock)
    return clock


def _system(world: World) -> Any:
    return world.adapter.profile_class.system  # type: ignore[attr-defined]
