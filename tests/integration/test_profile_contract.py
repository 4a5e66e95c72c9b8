"""The queue-profile contract: what every profile must do, asserted the same way for the
two shipped ones and a third written only for the tests (single_table_profile.py), on
SQLite and PostgreSQL, and for the eight presets on PostgreSQL, each on its system's
schema (preset_adapters.py).

Each case builds its profile's tables with known rows through the profile's adapter
(profile_adapters.py): 8 dead jobs with one error, 3 pending, 4 done and 1 stuck. The
assertions are what a person would notice: counts, listings, which rows a change touched
and what a staged redrive did to the jobs, never how the profile stores them. Where a
system keeps its jobs otherwise (it deletes a job that succeeds, shows no job running,
keeps an error with its class), its adapter declares the fact (``ProfileAdapter``) and the
contract asserts that instead, exactly. A clause a profile is known not to meet is named
in its adapter's ``departures``, with why: there the clause is an expected failure
(strict: once it holds, the test fails until the departure is taken out).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import Services
from services.changes.model import RequestState
from services.db import create_engine
from services.db.migrate import upgrade
from services.db.tables import QueueSample
from services.errors import NotFound, PreconditionFailed, UsageError
from services.estate.estate import Estate
from services.estate.model import CanonicalState, Count, DeadFilter, JobList
from services.estate.ops import Action, Selector, Target
from services.estate.profile import QueueProfile
from services.estate.signature import display_signature, error_signature
from services.plans.model import PlanState
from services.reads import gauges, samples
from tests.helpers.people import ALICE, BOB
from tests.integration.adapted import create_tables, need, registry
from tests.integration.preset_adapters import PRESET_ADAPTERS
from tests.integration.profile_adapters import (
    LEAVES_TAKEN_JOBS,
    SAYS_CANCELLED,
    TAKEN_RUNS,
    Built,
    MessageJobAdapter,
    ProfileAdapter,
    WorkerQueueAdapter,
    pending_at,
)
from tests.integration.single_table_profile import SingleTableAdapter
from tests.integration.support import START, Clock, RecordingNotifier, build_services
from tests.kinds import ChangeKind

QUEUE = "jobs"
DEAD, PENDING, DONE, STUCK = 8, 3, 4, 1
ERROR = "upstream timeout after 30000 ms calling billing-api"
AGAIN = "upstream timeout after 30000 ms calling billing-api, again"
SAMPLES = cast(sa.Table, QueueSample.__table__)
ADAPTERS: list[type[ProfileAdapter]] = [
    WorkerQueueAdapter,
    MessageJobAdapter,
    SingleTableAdapter,
    *PRESET_ADAPTERS,
]


@dataclass
class World:
    engine: AsyncEngine
    estate: Estate
    profile: QueueProfile
    adapter: ProfileAdapter
    built: Built
    clock: Clock
    services: Services
    kept: dict[CanonicalState, int]  # the rows built, by state, as the profile can keep them


@pytest.fixture(params=ADAPTERS, ids=lambda a: a.profile_class.name)
async def world(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[World]:
    kind: type[ProfileAdapter] = request.param
    need(kind, db_url)
    engine = create_engine(db_url)
    await upgrade(engine)  # queuebot's own tables beside the queue's: plans need both
    clock = Clock()
    estate = Estate(engine=engine, queues={QUEUE: kind.config()}, clock=clock, registry=registry())
    profile = estate.profile(QUEUE)
    assert profile.name == kind.profile_class.name
    adapter = kind(profile)
    async with engine.begin() as conn:
        await create_tables(conn, kind)
        built = await adapter.add(
            conn, now=START, dead=DEAD, error=ERROR, pending=PENDING, done=DONE, stuck=STUCK
        )
    # a system that deletes its finished jobs keeps none; one that marks no running job
    # shows none running
    done = DONE if kind.keeps_finished else 0
    stuck = STUCK if kind.shows_running else 0
    sizes = (len(built.dead), len(built.pending), len(built.done), len(built.stuck))
    assert sizes == (DEAD, PENDING, done, stuck)
    kept = {
        CanonicalState.PENDING: PENDING,
        CanonicalState.IN_FLIGHT: stuck,
        CanonicalState.SUCCEEDED: done,
        kind.dead_state: DEAD,
    }
    services = build_services(engine, estate, clock, RecordingNotifier())
    yield World(
        engine,
        estate,
        profile,
        adapter,
        built,
        clock,
        services,
        {s: n for s, n in kept.items() if n},
    )
    await engine.dispose()


class Departure(AssertionError):
    """A contract clause that does not hold where a profile's adapter names it."""


@contextmanager
def clause(request: pytest.FixtureRequest, world: World, name: str) -> Iterator[None]:
    """Asserts ``name``'s clause; where the adapter names it a departure, its failure (and
    only its failure) is the test's expected one, and its passing fails the test."""
    why = world.adapter.departures.get(name)
    if why is None:
        yield
        return
    request.applymarker(
        pytest.mark.xfail(raises=Departure, strict=True, reason=f"{name}: departs, as {why}")
    )
    try:
        yield
    except AssertionError as failed:
        raise Departure(f"{world.profile.name}: {name}: departs, as {why}") from failed


async def dead_list(world: World, **filters: str) -> JobList:
    async with world.estate.connect() as conn:
        return await world.profile.dead(conn, filters=DeadFilter(limit=100, **filters))


async def canonical(world: World, job_id: str) -> CanonicalState:
    async with world.estate.connect() as conn:
        return (await world.profile.show(conn, job_id=job_id)).canonical


async def counts(world: World) -> dict[CanonicalState, int]:
    async with world.estate.connect() as conn:
        triage = await world.profile.triage(conn, now=world.clock.now, since=None, job_type=None)
    return {s: n for s in CanonicalState if (n := triage.count_in(s))}


# -- reads ---------------------------------------------------------------------------------


async def test_reads_show_the_rows_built(world: World) -> None:
    profile, built, dead_state = world.profile, world.built, world.adapter.dead_state
    async with world.estate.connect() as conn:
        tables = await profile.tables(conn)
        triage = await profile.triage(conn, now=START, since=None, job_type=None)
        listed = await profile.dead(conn, filters=DeadFilter(limit=100))
        shown = await profile.show(conn, job_id=built.dead[-1])
        done = [await profile.show(conn, job_id=job) for job in built.done[:1]]
        with pytest.raises((UsageError, NotFound)):  # malformed: refused or not found
            await profile.show(conn, job_id="not-an-id")
        with pytest.raises(NotFound):
            await profile.show(conn, job_id=world.adapter.missing_id)
        stuck = await profile.stuck(conn, now=START, limit=10)

    assert set(tables) == {spec.role for spec in profile.specs}
    assert {s: triage.count_in(s) for s in CanonicalState if triage.count_in(s)} == world.kept
    assert triage.total == sum(world.kept.values())
    assert triage.stuck == len(built.stuck)
    assert triage.oldest_pending_at == pending_at(START, PENDING - 1)
    error = world.adapter.shown(ERROR)  # None: the system keeps no error text (Procrastinate)
    signatures = [Count(display_signature(error_signature(error)), DEAD)] if error else []
    assert triage.by_signature == signatures

    assert listed.total == DEAD
    assert [r.id for r in listed.rows] == built.dead[::-1]  # newest first
    assert {(r.canonical, r.error) for r in listed.rows} == {(dead_state, error)}

    assert (shown.job_id, shown.canonical) == (built.dead[-1], dead_state)
    assert [(d.job_id, d.canonical) for d in done] == [
        (job, CanonicalState.SUCCEEDED) for job in built.done[:1]
    ]
    assert stuck.total == len(built.stuck)
    assert [(r.id, r.canonical) for r in stuck.rows] == [
        (job, CanonicalState.IN_FLIGHT) for job in built.stuck
    ]


async def test_gauges_and_the_periodic_sample_count_the_rows_built(world: World) -> None:
    async with world.estate.connect() as conn:
        taken = await gauges.snapshot(conn, profile=world.profile, now=START)
    reason, by_state = world.adapter.failure_reason, world.kept
    total = sum(by_state.values())  # 16 where every kind of row is kept
    assert {s: n for s, n in taken.by_state.items() if n} == by_state
    assert set(taken.by_state) == set(CanonicalState)  # the others are there, as 0
    assert (taken.total, taken.pending, taken.dead_letters) == (total, PENDING, DEAD)
    assert taken.oldest_pending_at == pending_at(START, PENDING - 1)
    assert taken.oldest_pending_age == 10 * 60 * PENDING
    if reason is None:  # no failure reason kept: no breakdown, nothing judged actionable
        assert (taken.by_reason, taken.failed_actionable) == (None, None)
    else:  # the dead rows are failed with a timeout: all of them are actionable
        assert (taken.by_reason, taken.failed_actionable) == ({reason: DEAD}, DEAD)

    async with world.engine.begin() as conn:
        assert await samples.record(conn, profile=world.profile, now=START) == DEAD
        stored = (
            await conn.execute(sa.select(SAMPLES.c.total, SAMPLES.c.pending, SAMPLES.c.detail))
        ).one()
    assert stored.total == total and stored.pending == PENDING
    assert stored.detail == {
        "failed_actionable": None if reason is None else DEAD,
        "by_reason": None if reason is None else {reason: DEAD},
        "oldest_pending_at": pending_at(START, PENDING - 1).isoformat(),
        "by_state": {s.value: by_state.get(s, 0) for s in CanonicalState},
    }


async def test_a_plan_selects_the_dead_rows_dead_lists_in_the_same_order(world: World) -> None:
    ops = world.profile.plan_ops
    if not world.adapter.error_text:  # --error is refused, saying why
        async with world.estate.connect() as conn:
            every = await ops.candidate_ids(conn, selector=Selector(all_dead=True))
            with pytest.raises(UsageError, match="error"):
                await ops.candidate_ids(conn, selector=Selector(error_like="billing"))
        assert every == [r.id for r in (await dead_list(world)).rows] == world.built.dead[::-1]
        return
    async with world.estate.connect() as conn:
        every = await ops.candidate_ids(conn, selector=Selector(all_dead=True))
        like = await ops.candidate_ids(conn, selector=Selector(error_like="BILLING-api"))
        none = await ops.candidate_ids(conn, selector=Selector(error_like="no such error"))
    assert every == [r.id for r in (await dead_list(world)).rows] == world.built.dead[::-1]
    assert like == [r.id for r in (await dead_list(world, error_like="BILLING-api")).rows]
    assert like == every
    assert none == [] and (await dead_list(world, error_like="no such error")).total == 0


# -- guarded changes -----------------------------------------------------------------------


async def test_a_redrive_changes_exactly_the_frozen_rows_still_dead(
    world: World, request: pytest.FixtureRequest
) -> None:
    profile, built, changes = world.profile, world.built, world.profile.changes
    others = [*built.done[:1], built.pending[0], *built.stuck]
    named = (*built.dead, *others, world.adapter.missing_id)
    async with world.estate.connect() as conn:
        frozen = await changes.freeze(conn, action=Action.REDRIVE, selector=Selector(ids=named))
    assert sorted(t.id for t in frozen.targets) == sorted(built.dead)
    assert {i.id for i in frozen.ineligible} == {*others, world.adapter.missing_id}
    assert all(i.why.strip() for i in frozen.ineligible)

    moved = built.dead[0]  # meanwhile another redrive of it goes through and a worker takes it
    async with world.engine.begin() as conn:
        first = await changes.freeze(conn, action=Action.REDRIVE, selector=Selector(ids=(moved,)))
        await changes.apply(
            conn,
            action=Action.REDRIVE,
            targets=first.targets,
            now=world.clock.now,
            note="an earlier request",
            duplicates=False,
        )
        await world.adapter.claim(conn, [moved], now=world.clock.now)

    async with world.engine.begin() as conn:
        applied = await changes.apply(
            conn,
            action=Action.REDRIVE,
            targets=frozen.targets,
            now=world.clock.now,
            note="the contract's request",
            duplicates=False,
        )
    assert sorted(applied.changed) == sorted(built.dead[1:])
    assert [s.id for s in applied.skipped] == [moved] and applied.skipped[0].why.strip()
    assert {await canonical(world, job) for job in built.dead[1:]} == {CanonicalState.PENDING}
    # not forced back: a worker holds it (seen waiting where no running job is seen)
    running = world.adapter.shows_running
    taken = CanonicalState.IN_FLIGHT if running else CanonicalState.PENDING
    after = {
        CanonicalState.PENDING: PENDING + DEAD - 1 + (0 if running else 1),
        CanonicalState.IN_FLIGHT: len(built.stuck) + (1 if running else 0),
        CanonicalState.SUCCEEDED: len(built.done),
    }
    with clause(request, world, TAKEN_RUNS):
        assert await canonical(world, moved) is taken
        assert await counts(world) == {s: n for s, n in after.items() if n}
        assert (await dead_list(world)).total == 0
        assert profile.dead_count(await _status_counts(world)) == 0


async def test_a_cancelled_dead_job_is_never_redriven(
    world: World, request: pytest.FixtureRequest
) -> None:
    changes, victim = world.profile.changes, world.built.dead[-1]
    if not world.adapter.cancels:  # GoodJob: cancel is off, saying why
        async with world.estate.connect() as conn:
            with pytest.raises(PreconditionFailed, match=r"cancel on queue 'jobs' is off: \w"):
                await changes.freeze(conn, action=Action.CANCEL, selector=Selector(ids=(victim,)))
        return
    async with world.engine.begin() as conn:
        frozen = await changes.freeze(conn, action=Action.CANCEL, selector=Selector(ids=(victim,)))
        assert [t.id for t in frozen.targets] == [victim]
        applied = await changes.apply(
            conn,
            action=Action.CANCEL,
            targets=frozen.targets,
            now=world.clock.now,
            note="not wanted any more",
            duplicates=False,
        )
    assert applied.changed == [victim]
    async with world.estate.connect() as conn:
        again = await changes.freeze(conn, action=Action.REDRIVE, selector=Selector(ids=(victim,)))
    assert again.targets == []
    assert [i.id for i in again.ineligible] == [victim]
    with clause(request, world, SAYS_CANCELLED):
        assert "cancelled" in again.ineligible[0].why.lower()


# -- a staged redrive through the real services ----------------------------------------


async def _status_counts(world: World) -> dict[str, int]:
    async with world.estate.connect() as conn:
        return await world.profile.status_counts(conn)


async def tick(world: World, seconds: float = 5) -> None:
    world.clock.advance(seconds=seconds)
    await world.services.scheduler.run_due()


async def waiting(world: World) -> list[str]:
    async with world.engine.connect() as conn:
        return sorted(await world.adapter.waiting(conn))


async def complete(world: World, jobs: list[str]) -> None:
    async with world.engine.begin() as conn:
        await world.adapter.complete(conn, jobs, now=world.clock.now)


async def flat_history(world: World) -> None:
    """The dead-letter count written down 15 minutes ago, equal to now: not growing."""
    async with world.engine.begin() as conn:
        await samples.record(
            conn, profile=world.profile, now=world.clock.now - timedelta(minutes=15)
        )


async def request_plan(world: World) -> int:
    view = await world.services.changes.request(
        kind=ChangeKind.PLAN,
        queue=QUEUE,
        selector=Selector(all_dead=True),
        reason="billing-api timeouts fixed by the new connection pool",
        actor=ALICE,
    )
    assert view.state is RequestState.PENDING
    return view.number


async def finished(world: World, job: str) -> CanonicalState | None:
    """A finished job's state as /queue show says it; None where it is gone (a system that
    deletes a job that succeeds: show finds no such job)."""
    if not world.profile.success_deletes:
        return await canonical(world, job)
    with pytest.raises(NotFound):
        await canonical(world, job)
    return None


async def test_a_staged_redrive_completes_halts_on_refailure_and_rolls_back(
    world: World, request: pytest.FixtureRequest
) -> None:
    built, changes, plans = world.built, world.services.changes, world.services.plans
    await complete(world, await waiting(world))  # the worker drains what was already queued
    await flat_history(world)

    # A plan over every dead job, approved by a second person, runs wave by wave.
    number = await request_plan(world)
    preview = await changes.get(number=number)
    assert preview.eligible == DEAD and preview.schedule == [5, DEAD - 5]
    decision = await changes.approve(number=number, actor=BOB)
    assert decision.executed and decision.view.result is not None
    plan = decision.view.result.plan
    assert plan is not None
    waves = []
    for _ in range(5):
        jobs = await waiting(world)
        if not jobs:
            break
        waves.append(len(jobs))
        await tick(world)  # a wave still running: the plan waits for it
        assert await waiting(world) == jobs
        await complete(world, jobs)
        await tick(world)
    assert waves == [5, DEAD - 5]
    done = await plans.view(number=plan)
    assert done.state is PlanState.COMPLETED and done.succeeded == DEAD
    gone = world.profile.success_deletes
    succeeded = None if gone else CanonicalState.SUCCEEDED
    assert {await finished(world, job) for job in built.dead} == {succeeded}
    assert (await dead_list(world)).total == 0
    async with world.estate.connect() as conn:  # each redrive counted once
        redriven = await world.profile.plan_ops.redrive_counts(
            conn, targets=[Target(id=j, key={}, state="", signature="", row={}) for j in built.dead]
        )
    assert redriven == dict.fromkeys(built.dead, 1)

    # A second plan: the worker fails one job of its sample again, so the plan halts.
    async with world.engine.begin() as conn:
        fresh = await world.adapter.add(conn, now=world.clock.now, dead=6, error=ERROR)
    await flat_history(world)
    before = {r.id: (r.error, r.attempts) for r in (await dead_list(world)).rows}
    assert sorted(before) == sorted(fresh.dead)
    second = await request_plan(world)
    decision = await changes.approve(number=second, actor=BOB)
    assert decision.view.result is not None and decision.view.result.plan is not None
    plan = decision.view.result.plan
    sample = await waiting(world)
    assert len(sample) == 5 and set(sample) <= set(fresh.dead)
    refailed, claimed, unclaimed = sample[0], sample[1], sample[2:]
    async with world.engine.begin() as conn:
        await world.adapter.fail(conn, [refailed], now=world.clock.now, error=AGAIN)
        await world.adapter.claim(conn, [claimed], now=world.clock.now)
    await tick(world)
    halted = await plans.view(number=plan)
    assert halted.state is PlanState.HALTED
    with clause(request, world, TAKEN_RUNS):  # the one that failed, not the one taken
        assert halted.redead == 1
    await tick(world, 60)
    unseen = [] if world.adapter.shows_running else [claimed]  # a claim not in the table
    assert await waiting(world) == sorted(unclaimed + unseen)  # nothing more was redriven

    # Rolled back, approved: the unclaimed go back to dead with their earlier values.
    rollback = await changes.request(
        kind=ChangeKind.ROLLBACK,
        queue=None,
        selector=Selector(plan=plan),
        reason="the fix did not hold",
        actor=ALICE,
    )
    back = await changes.approve(number=rollback.number, actor=BOB)
    assert back.executed and back.view.result is not None
    changed = sorted(back.view.result.changed)
    assert set(unclaimed) <= set(changed)
    view = await plans.view(number=plan)
    assert view.state is PlanState.ROLLED_BACK and view.rolled_back == len(changed)
    dead_now = {r.id: (r.error, r.attempts) for r in (await dead_list(world)).rows}
    assert {job: dead_now[job] for job in unclaimed} == {job: before[job] for job in unclaimed}
    # the error it died of again (where the system writes none: the one before)
    again = world.adapter.shown(AGAIN) if world.adapter.final_error else before[refailed][0]
    assert dead_now[refailed][0] == again
    assert set(dead_now) >= set(fresh.dead) - {claimed}
    assert await waiting(world) == []
    with clause(request, world, LEAVES_TAKEN_JOBS):
        assert changed == unclaimed
        assert sorted(dead_now) == sorted(set(fresh.dead) - {claimed})
        assert await canonical(world, claimed) is CanonicalState.IN_FLIGHT  # left alone


async def test_a_job_that_died_again_is_taken_by_from_plan_and_its_death_is_not_growth(
    world: World,
) -> None:
    """A plan's job dies again (the plan halts), the plan is resumed and completes: the job
    is the one /queue dlq --from-plan lists and /queue redrive --from-plan takes, and its
    death, though recent, is not counted as the dead letters growing (queuebot redrove it)."""
    changes, plans = world.services.changes, world.services.plans
    await complete(world, await waiting(world))
    await flat_history(world)
    first = await changes.approve(number=await request_plan(world), actor=BOB)
    assert first.view.result is not None and first.view.result.plan is not None
    plan = first.view.result.plan
    sample = await waiting(world)
    refailed = sample[0]
    async with world.engine.begin() as conn:
        await world.adapter.fail(conn, [refailed], now=world.clock.now, error=AGAIN)
        await world.adapter.complete(conn, sample[1:], now=world.clock.now)
    await tick(world)
    assert (await plans.view(number=plan)).state is PlanState.HALTED
    resume = await changes.request(
        kind=ChangeKind.RESUME,
        queue=None,
        selector=Selector(plan=plan),
        reason="the pool fix is deployed now",
        actor=ALICE,
    )
    await changes.approve(number=resume.number, actor=BOB)
    await tick(world)
    await complete(world, await waiting(world))
    await tick(world)
    done = await plans.view(number=plan)
    assert done.state is PlanState.COMPLETED and done.redead == 1

    again = await plans.dead_again(number=plan, queue=None)
    assert again.jobs == (refailed,)
    assert [r.id for r in (await dead_list(world)).rows] == [refailed]  # the only dead one
    async with world.estate.connect() as conn:
        listed = await world.profile.dead(conn, filters=DeadFilter(job_ids=again.jobs))
        died = await world.profile.plan_ops.dead_since(
            conn, since=world.clock.now - timedelta(minutes=10)
        )
    assert [r.id for r in listed.rows] == [refailed]

    view = await changes.request(
        kind=ChangeKind.PLAN,
        queue=None,
        selector=Selector(from_plan=plan),
        reason="the pool fix holds: the one that died again goes back",
        actor=ALICE,
    )
    assert view.eligible == 1
    growth = next(c for c in view.checks if c[0].startswith("dead letters not growing"))
    assert growth[1] == "ok", growth
    if died:  # the estate records when it died: the death is seen, and not counted
        assert [d.job for d in died] == [refailed]
        assert (
            f"all of them jobs queuebot redrove (P-{plan}) that died again: not counted as "
            "growth" in growth[2]
        )
    second = await changes.approve(number=view.number, actor=BOB)
    assert second.executed and await waiting(world) == [refailed]
