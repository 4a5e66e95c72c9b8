"""What a plan halted by jobs dead again says of their cause, and says no more than
queuebot can read: the same error as before (the fix did not hold), a new one (both
named), or, where no error text is kept, that the cause cannot be read here.

On the presets' tables (PostgreSQL: Procrastinate, which keeps no error text; pg-boss,
which keeps its jobs' errors in ``output``), and on a team's worker table (SQLite and
PostgreSQL) for a job that died again without an error text and for a plan frozen by an
earlier version's signature rules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from services.estate.ops import Selector
from services.estate.signature import earlier_signature
from services.plans.model import PlanState, PlanView
from tests.helpers.people import ALICE, BOB, BOB_APPROVER
from tests.integration.preset_adapters import PgBossAdapter, PresetAdapter, ProcrastinateAdapter
from tests.integration.team_support import Team
from tests.integration.test_halted_plan_counts import eight_dead, say, tick, worker
from tests.integration.test_presets import World, open_world
from tests.kinds import ChangeKind

OUTAGE = (
    "Request failed with status code 503: POST https://api.pay.example/v1/charges/{charge}/"
    "refund (request id {request})"
)


async def preset(pg_url: str, kind: type[PresetAdapter]) -> AsyncIterator[World]:
    async for world in open_world(pg_url, kind):
        yield world


@pytest.fixture
async def procrastinate(pg_url: str) -> AsyncIterator[World]:
    async for world in preset(pg_url, ProcrastinateAdapter):
        yield world


@pytest.fixture
async def pg_boss(pg_url: str) -> AsyncIterator[World]:
    async for world in preset(pg_url, PgBossAdapter):
        yield world


async def sample_dies_again(world: World, error: str | None) -> PlanView:
    """A staged redrive of the world's four dead jobs, approved; its sample (all four)
    fails again with ``error`` (the system's own failure; Procrastinate writes none)."""
    asked = await world.services.changes.request(
        kind=ChangeKind.PLAN,
        queue="q",
        selector=Selector(all_dead=True),
        reason="the payments API answers again",
        actor=ALICE,
    )
    done = await world.services.changes.approve(number=asked.number, actor=BOB)
    assert done.view.result is not None and done.view.result.plan is not None
    async with world.engine.begin() as conn:
        sample = sorted(set(await world.adapter.waiting(conn)) - set(world.built.pending))
        assert len(sample) == 4
        await world.adapter.fail(conn, sample[:2], now=world.estate.clock(), error=error or "")
    world.estate.clock.advance(seconds=5)  # type: ignore[attr-defined]
    await world.services.scheduler.run_due()
    view = await world.services.plans.view(number=done.view.result.plan)
    assert view.state is PlanState.HALTED and view.note is not None
    return view


async def test_procrastinate_s_halt_says_the_cause_cannot_be_read_here(
    procrastinate: World,
) -> None:
    view = await sample_dies_again(procrastinate, None)
    assert view.note == (
        "HALTED: 2 job(s) of sample re-entered the dead-letter state; "
        "Procrastinate keeps a job's errors in its workers' logs, not in the database, so "
        "whether they died of the same cause as before cannot be read here. Nothing more "
        "is redriven."
    )
    assert "same signature" not in view.note and "did not hold" not in view.note


async def set_errors(world: World, text: str) -> None:
    """Each of the pg-boss world's dead jobs failed with ``text``, its own ids in it."""
    async with world.engine.begin() as conn:
        for i, job in enumerate(world.built.dead):
            error = text.format(charge=f"ch_{i}NfK2a9xQ", request=f"a970eb8{i}")
            await conn.execute(
                sa.text(
                    "UPDATE pgboss.job SET output = jsonb_build_object('message', "
                    "CAST(:e AS text)) WHERE id = CAST(:id AS uuid)"
                ),
                {"e": error, "id": job},
            )


async def test_the_same_outage_again_is_the_same_error_though_its_ids_differ(
    pg_boss: World,
) -> None:
    await set_errors(pg_boss, OUTAGE)
    again = OUTAGE.format(charge="ch_8LpQ4v1ZtY", request="73e1c0aa")
    view = await sample_dies_again(pg_boss, again)
    assert view.note is not None
    assert (
        "the same signature as before: the fix did not hold ('Request failed with status "
        "code 503: POST https://api.pay.example/v1/charges/<id>/refund (request id <n>)')"
    ) in view.note
    assert "new error" not in view.note


async def test_a_new_error_is_named_beside_the_one_the_plan_was_for(pg_boss: World) -> None:
    await set_errors(pg_boss, OUTAGE)
    view = await sample_dies_again(pg_boss, "Request failed with status code 422 (request id 7)")
    assert view.note is not None
    assert (
        "a new error, not the one the plan was for: now 'Request failed with status code "
        "422 (request id <n>)', was 'Request failed with status code 503: POST "
        "https://api.pay.example/v1/charges/<id>/refund (request id <n>)'"
    ) in view.note


async def test_a_job_that_died_again_without_an_error_text_is_not_judged(team: Team) -> None:
    """The team's table keeps error texts, but this time the worker wrote none: queuebot
    says it cannot tell, not that the fix did not hold."""
    await eight_dead(team)
    await say(team, '/queue redrive --all --sample 1 --reason "smtp relay fixed"')
    await say(team, "/queue approve CR-1", BOB_APPROVER)
    await worker(team, "UPDATE jobs SET state = 'dead', last_error = NULL WHERE state = 'queued'")
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.HALTED and view.note is not None
    assert (
        "1 job(s) of sample re-entered the dead-letter state; no error text was "
        "recorded for it, so whether it died of the same cause as before cannot be read "
        "here: look at the workers' logs"
    ) in view.note
    assert "did not hold" not in view.note and "new error" not in view.note


HOOK = "TimeoutError: POST https://hooks.example/v1/deliveries/{n} did not answer within 30 s"


async def test_a_plan_frozen_by_the_earlier_signature_rules_halts_as_the_same_error(
    team: Team,
) -> None:
    """A plan frozen before ids of every shape were taken out keeps the signatures the
    earlier rules made ("... POST <url> ..."); running on after the upgrade, the same
    error again is judged the same, not a new error."""
    await eight_dead(team)
    await worker(team, "UPDATE jobs SET last_error = :e", e=HOOK.format(n=4411))
    await say(team, '/queue redrive --all --sample 1 --reason "hooks fixed"')
    await say(team, "/queue approve CR-1", BOB_APPROVER)
    earlier = earlier_signature(HOOK.format(n=4411))
    assert earlier == "TimeoutError: POST <url> did not answer within <n> s"
    async with team.engine.begin() as conn:  # as the earlier version froze them
        await conn.execute(sa.text("UPDATE qb_plan_items SET signature = :s"), {"s": earlier})
    await worker(
        team,
        "UPDATE jobs SET state = 'dead', last_error = :e WHERE state = 'queued'",
        e=HOOK.format(n=9),
    )
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.HALTED and view.note is not None
    assert "the same signature as before: the fix did not hold" in view.note
    assert "new error" not in view.note
