"""What a person notices of the presets beyond the profile contract: what config check says
of each, a job the system pruned between a request and its approval, a rollback that gives
a job back every value the retry changed, one queue of a system's table, a preset on a
database it cannot be on, and the housekeeping report in the system's words. PostgreSQL
only (the systems are); the contract (test_profile_contract.py) holds the rest."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.bootstrap import Services
from services.alerts import detectors
from services.config import QueueConfig
from services.config.alerts import DetectorsConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.errors import ConfigError, PreconditionFailed, UsageError
from services.estate import estimate
from services.estate.estate import Estate
from services.estate.model import CanonicalState, DeadFilter
from services.estate.ops import Action, ItemRef, Selector
from services.estate.profile import QueueProfile, plain
from services.estate.system.base import GONE
from services.reads import samples
from tests.helpers.people import ALICE, BOB
from tests.integration.adapted import need
from tests.integration.housekeeping_support import housekeeper
from tests.integration.preset_adapters import (
    PRESET_ADAPTERS,
    GoodJobAdapter,
    PgBossAdapter,
    PresetAdapter,
    ProcrastinateAdapter,
    RiverAdapter,
    SolidQueueAdapter,
    _solid_error,
)
from tests.integration.profile_adapters import Built
from tests.integration.support import START, Clock, RecordingNotifier, build_services
from tests.kinds import ChangeKind

pytestmark = pytest.mark.postgres
ERROR = "TimeoutError: smtp relay did not answer in 30 s"
ADAPTERS = PRESET_ADAPTERS


@dataclass
class World:
    engine: AsyncEngine
    estate: Estate
    profile: QueueProfile
    adapter: PresetAdapter
    built: Built
    services: Services


async def open_world(
    pg_url: str, kind: type[PresetAdapter], **options: Any
) -> AsyncIterator[World]:
    need(kind, pg_url)
    engine = create_engine(pg_url)
    await upgrade(engine)
    clock = Clock()
    config = QueueConfig(preset=kind.profile_class.name, **options)
    estate = Estate(engine=engine, queues={"q": config}, clock=clock)
    profile = estate.profile("q")
    adapter = kind(profile)
    async with engine.begin() as conn:
        await kind.create(conn)
        built = await adapter.add(conn, now=START, dead=4, error=ERROR, pending=1, done=2, stuck=1)
    services = build_services(engine, estate, clock, RecordingNotifier())
    try:
        yield World(engine, estate, profile, adapter, built, services)
    finally:
        await engine.dispose()


@pytest.fixture(params=ADAPTERS, ids=lambda a: a.profile_class.name)
async def world(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[World]:
    async for w in open_world(pg_url, request.param):
        yield w


async def test_config_check_names_the_preset_and_what_is_off(world: World) -> None:
    async with world.estate.connect() as conn:
        said = "\n".join(await world.profile.describe(conn))
    system = world.adapter.profile_class.system  # type: ignore[attr-defined]
    assert f"preset {world.profile.name} ({system}): every queue of" in said
    assert f"dead = {world.adapter.dead_value}" in said
    # what a redriven job that left the table means: a fact where only successes are deleted
    fixed = world.profile.name in ("graphile-worker", "que")
    assert (
        f"a job that leaves the table: succeeded ({system} deletes a job only when it succeeds)"
        if fixed
        else "a job that leaves the table: outcome unknown, and a staged redrive halts on it ("
    ) in said
    if world.adapter.error_text:
        assert "no error text" not in said
    else:  # Procrastinate: what needs an error text is off, and said so
        assert "no error text: Procrastinate keeps a job's errors in its workers' logs" in said
        assert "--error-like selects nothing" in said


async def test_a_job_pruned_between_request_and_approval_is_reported_as_skipped(
    world: World,
) -> None:
    jobs = world.built.dead[:3]
    view = await world.services.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="q",
        selector=Selector(ids=tuple(jobs)),
        reason="the smtp relay answers again",
        actor=ALICE,
    )
    async with world.engine.begin() as conn:  # the system's pruner deletes one meanwhile
        await world.adapter.prune(conn, jobs[0])
    decision = await world.services.changes.approve(number=view.number, actor=BOB)
    assert decision.executed and decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(jobs[1:])
    skipped = {s.id: s.why for s in decision.view.result.skipped}
    assert list(skipped) == [jobs[0]]
    why = skipped[jobs[0]]
    assert why.startswith("no longer in") and world.adapter.profile_class.system in why  # type: ignore[attr-defined]


async def test_a_rollback_gives_a_redriven_job_back_every_value_its_retry_changed(
    world: World,
) -> None:
    profile, ops, job = world.profile, world.profile.plan_ops, world.built.dead[0]
    item = ItemRef(job_id=job, part=None, original={})
    async with world.engine.begin() as conn:
        q = (await profile.tables(conn))["job"]
        columns = [q.c(c) for c in profile.restored]  # type: ignore[attr-defined]
        key = profile.coerce_id(q.c("id"), job)
        before = await _seen(world, conn, columns, key, job)
        originals = await ops.originals(conn, items=[item])
        await redriven(world, conn, job, note="wave 1")
        assert await _seen(world, conn, columns, key, job) != before
        kept = ItemRef(job_id=job, part=None, original=_as_json(originals[job]))
        assert await ops.unclaimed(conn, items=[kept]) == [job]
        assert await ops.rollback(conn, items=[kept], now=START, note="undo") == [job]
        after = await _seen(world, conn, columns, key, job)
    assert after == before


async def redriven(world: World, conn: AsyncConnection, job: str, *, note: str) -> None:
    """``job`` frozen and redriven, as a plan's wave does."""
    changes = world.profile.changes
    frozen = await changes.freeze(conn, action=Action.REDRIVE, selector=Selector(ids=(job,)))
    await changes.apply(
        conn, action=Action.REDRIVE, targets=frozen.targets, now=START, note=note, duplicates=False
    )


async def _seen(
    world: World, conn: AsyncConnection, columns: list[Any], key: Any, job: str
) -> tuple[Any, ...]:
    """A job as a rollback must give it back: the columns its retry changed, its state and
    the error /queue dlq shows of it (kept in another table on some systems)."""
    values = (
        (await conn.execute(sa.select(*columns).where(columns_table(world).c("id") == key))).one()
        if columns
        else ()
    )
    shown = await world.profile.show(conn, job_id=job)
    listed = await world.profile.dead(conn, filters=DeadFilter(limit=100))
    errors = {r.id: r.error for r in listed.rows}
    return (tuple(values), shown.status, errors.get(job))


def columns_table(world: World) -> Any:
    return world.profile.reflected["job"]  # type: ignore[index]


def _as_json(values: dict[str, Any]) -> dict[str, Any]:
    """A plan item's originals as they come back from its JSON: times as ISO text."""
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in values.items()}


async def test_a_claimed_job_is_not_rolled_back(world: World) -> None:
    if not world.adapter.shows_running:
        pytest.skip("Que holds a job by an advisory lock: a claim is not in its table")
    ops, job = world.profile.plan_ops, world.built.dead[1]
    async with world.engine.begin() as conn:
        originals = await ops.originals(conn, items=[ItemRef(job, None, {})])
        await redriven(world, conn, job, note="")
        await world.adapter.claim(conn, [job], now=START)  # a worker picks it up
        kept = ItemRef(job_id=job, part=None, original=_as_json(originals[job]))
        assert await ops.unclaimed(conn, items=[kept]) == []
        assert await ops.rollback(conn, items=[kept], now=START, note="undo") == []


@pytest.mark.parametrize("kind", ADAPTERS, ids=lambda a: a.profile_class.name)
async def test_one_queue_of_the_table_is_the_queue(pg_url: str, kind: type[PresetAdapter]) -> None:
    async for w in open_world(pg_url, kind, queue_name="emails"):
        async with w.engine.begin() as conn:  # another queue's dead jobs beside the built ones
            await w.adapter.move(conn, w.built.dead[:2], "emails")
        async with w.estate.connect() as conn:
            listed = await w.profile.dead(conn, filters=DeadFilter(limit=10))
            triage = await w.profile.triage(conn, now=START, since=None, job_type=None)
            said = "\n".join(await w.profile.describe(conn))
            frozen = await w.profile.changes.freeze(
                conn, action=Action.REDRIVE, selector=Selector(ids=tuple(w.built.dead))
            )
        assert sorted(r.id for r in listed.rows) == sorted(w.built.dead[:2])
        assert triage.dead_letters == 2 and triage.total == 2
        assert "queue 'emails' of" in said
        assert sorted(t.id for t in frozen.targets) == sorted(w.built.dead[:2])
        assert {i.why for i in frozen.ineligible} == {"not found"}


async def test_config_check_says_when_no_job_is_in_the_queue_named(pg_url: str) -> None:
    async for w in open_world(pg_url, RiverAdapter, queue_name="emials"):
        async with w.estate.connect() as conn:
            said = "\n".join(await w.profile.describe(conn))
        assert "no job of public.river_job is in queue 'emials' now (its queues: 'default')" in said


async def test_a_preset_on_sqlite_is_refused_saying_where_it_can_be(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'q.db'}")
    estate = Estate(engine=engine, queues={"q": QueueConfig(preset="river")})
    try:
        async with estate.connect() as conn:
            with pytest.raises(ConfigError, match="reads River's tables in PostgreSQL"):
                await estate.profile("q").tables(conn)
    finally:
        await engine.dispose()


def test_an_unknown_preset_is_refused_naming_the_presets() -> None:
    engine = create_engine("sqlite+aiosqlite:///:memory:")
    with pytest.raises(ConfigError, match="unknown preset 'sidekiq'; expected one of "):
        Estate(engine=engine, queues={"q": QueueConfig(preset="sidekiq")})


async def test_a_redrive_is_refused_where_procrastinates_retry_function_is_missing(
    pg_url: str,
) -> None:
    async for w in open_world(pg_url, ProcrastinateAdapter):
        async with w.engine.begin() as conn:
            await conn.exec_driver_sql(
                "DROP FUNCTION procrastinate_retry_job_v2(bigint, timestamptz, integer, "
                "character varying, character varying)"
            )
        async with w.estate.connect() as conn:
            said = "\n".join(await w.profile.describe(conn))
            with pytest.raises(PreconditionFailed, match="procrastinate_retry_job_v2 is missing"):
                await w.profile.changes.freeze(
                    conn, action=Action.REDRIVE, selector=Selector(ids=(w.built.dead[0],))
                )
        assert "requeue and redrive are off" in said


async def test_dlq_by_error_and_type_in_the_systems_words(world: World) -> None:
    async with world.estate.connect() as conn:
        if world.adapter.error_text:
            listed = await world.profile.dead(conn, filters=DeadFilter(error_like="SMTP relay"))
            assert listed.total == 4
        else:
            with pytest.raises(UsageError, match="--error-like selects nothing"):
                await world.profile.dead(conn, filters=DeadFilter(error_like="smtp"))
        with pytest.raises(UsageError, match="keeps no failure reason"):
            await world.profile.dead(conn, filters=DeadFilter(reason="timeout"))


async def test_housekeeping_reports_on_a_systems_queue_and_changes_nothing(world: World) -> None:
    async with world.estate.connect() as conn:
        before = await world.profile.status_counts(conn)
    report = await housekeeper(world.engine, world.estate, chat=False).run(actor=ALICE)
    said = "\n".join(report.lines())
    system = world.adapter.profile_class.system  # type: ignore[attr-defined]
    if world.adapter.shows_running:
        stuck = world.built.stuck[0]
        assert f"1 {system} job(s) running longer than 15 min" in said and stuck in said
    else:  # Que: no job is seen running
        assert f"no {system} job running longer than 15 min" in said
    assert f"{system} queues are reported on, never changed" in said
    assert report.changed == 0
    async with world.estate.connect() as conn:
        assert await world.profile.status_counts(conn) == before


async def test_the_dead_letter_detector_fires_on_a_systems_growing_dead_jobs(
    world: World,
) -> None:
    config = DetectorsConfig()
    async with world.engine.begin() as conn:
        await samples.record(conn, profile=world.profile, now=START - timedelta(minutes=15))
        await world.adapter.add(
            conn, now=START, dead=config.dead_letter_growth.min_increase, error=ERROR
        )
        await samples.record(conn, profile=world.profile, now=START)
        verdicts = await detectors.judge(conn, profile=world.profile, config=config, now=START)
    growing = [v for v in verdicts if v.detector == detectors.DEAD_LETTERS]
    assert growing and growing[0].firing


async def test_renamed_columns_and_added_statuses_apply_on_top_of_a_preset(pg_url: str) -> None:
    options = {"columns": {"job.kind": "job_kind"}, "statuses": {"dead": ["dead_on_arrival"]}}
    engine = create_engine(pg_url)
    async with engine.begin() as conn:
        await RiverAdapter.create(conn)
        await conn.exec_driver_sql("ALTER TABLE river_job RENAME COLUMN kind TO job_kind")
        await conn.exec_driver_sql("ALTER TYPE river_job_state ADD VALUE 'dead_on_arrival'")
    async with engine.begin() as conn:
        await conn.exec_driver_sql(
            "INSERT INTO river_job (job_kind, max_attempts, state, attempt, finalized_at) "
            "VALUES ('mailer', 1, 'discarded', 1, now())"
        )
        await conn.exec_driver_sql(
            "ALTER TABLE river_job DROP CONSTRAINT finalized_or_finalized_at_null"
        )
        await conn.exec_driver_sql(
            "INSERT INTO river_job (job_kind, max_attempts, state, attempt) "
            "VALUES ('mailer', 1, 'dead_on_arrival', 1)"
        )
    estate = Estate(engine=engine, queues={"q": QueueConfig(preset="river", **options)})
    try:
        async with estate.connect() as conn:
            triage = await estate.profile("q").triage(conn, now=START, since=None, job_type=None)
        assert triage.dead_letters == 2
        assert [(t.key, t.total) for t in triage.by_type] == [("mailer", 2)]
    finally:
        await engine.dispose()


async def _analysed_triage(world: World, *, exact: bool) -> Any:
    async with world.estate.connect() as conn:
        return await world.profile.triage(conn, now=START, since=None, job_type=None, exact=exact)


async def _analyse(world: World) -> None:
    async with world.estate.connect() as conn:
        table = world.profile.job(await world.profile.tables(conn)).name
    async with world.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql(f"VACUUM ANALYZE {table}")  # a name from the profile


@pytest.mark.parametrize(
    "kind", [PgBossAdapter, GoodJobAdapter, SolidQueueAdapter], ids=lambda a: a.profile_class.name
)
async def test_a_large_table_no_index_tells_states_apart_estimates_its_succeeded_jobs_in_one_pass(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, kind: type[PresetAdapter]
) -> None:
    """pg-boss's table has no index leading with its state, GoodJob's and Solid Queue's no
    state at all: where most of the jobs succeeded, triage reads the table once, counting
    every job that did not succeed (and taking the dead ones' errors) from that pass, and
    estimates the succeeded ones from the statistics, marked so. Everything an operator
    acts on is what an exact triage says."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    async for world in open_world(pg_url, kind):
        (done,) = [s for s in world.profile.statuses_in(CanonicalState.SUCCEEDED) if s != GONE]
        async with world.engine.begin() as conn:
            await world.adapter.add(conn, now=START, dead=0, error=ERROR, done=80)
        await _analyse(world)
        found = await _analysed_triage(world, exact=False)
        counted = await _analysed_triage(world, exact=True)
        estimated = {s.status: (s.count, s.estimated) for s in found.by_status}
        assert estimated[done] == (82, True)  # the statistics are fresh here
        exact = {s.status: s.count for s in counted.by_status if not s.estimated}
        assert {s: n for s, (n, _) in estimated.items()} == exact
        assert [s.status for s in counted.by_status if s.estimated] == []
        assert (found.stuck, found.oldest_pending_at) == (counted.stuck, counted.oldest_pending_at)
        assert found.by_signature == counted.by_signature
        if kind.error_text:
            assert found.by_signature[0].count == 4
        assert found.total == counted.total == 4 + 1 + 82 + 1


async def test_solid_queues_one_pass_reads_every_execution_table_as_an_exact_triage_does(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Solid Queue's one pass joins its execution tables: a job scheduled, one blocked,
    one ready, one running for an hour, the dead ones, and a job that holds both a failed
    and a ready execution (the failed one wins, as in the state's own expression) are
    counted, aged and read for errors as an exact triage does; where a deployment has no
    blocked executions table, its jobs read as unknown in both."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    async for world in open_world(pg_url, SolidQueueAdapter):
        async with world.engine.begin() as conn:
            built = await world.adapter.add(
                conn, now=START, dead=0, error=ERROR, done=80, pending=3
            )  # waiting since 10, 20 and 30 minutes ago
            later, held, both = (int(j) for j in built.pending)
            at = (START - timedelta(minutes=5)).replace(tzinfo=None)
            await conn.execute(
                sa.text("DELETE FROM solid_queue_ready_executions WHERE job_id IN (:a, :b)"),
                {"a": later, "b": held},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO solid_queue_scheduled_executions"
                    " (job_id, queue_name, priority, scheduled_at, created_at)"
                    " VALUES (:job, 'default', 0, :at, :at)"
                ),
                {"job": later, "at": at},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO solid_queue_blocked_executions"
                    " (job_id, queue_name, priority, concurrency_key, expires_at, created_at)"
                    " VALUES (:job, 'default', 0, 'account/1', :at, :at)"
                ),
                {"job": held, "at": at},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO solid_queue_failed_executions (job_id, error, created_at)"
                    " VALUES (:job, :error, :at)"
                ),
                {"job": both, "error": _solid_error(ERROR), "at": at},
            )
        await _analyse(world)
        found = await _analysed_triage(world, exact=False)
        counted = await _analysed_triage(world, exact=True)
        assert {s.status: (s.count, s.estimated) for s in found.by_status} == {
            "failed": (5, False),
            "ready": (1, False),
            "scheduled": (1, False),
            "blocked": (1, False),
            "claimed": (1, False),
            "finished": (82, True),
        }
        exact = {s.status: s.count for s in counted.by_status}
        assert {s.status: s.count for s in found.by_status} == exact
        # the blocked job waits longest: the one held by a failed execution too is dead
        assert found.oldest_pending_at == counted.oldest_pending_at
        assert found.oldest_pending_at == START - timedelta(minutes=20)
        assert (found.stuck, counted.stuck) == (1, 1)
        assert found.by_signature == counted.by_signature
        assert found.by_signature[0].count == 5

        async with world.engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE solid_queue_blocked_executions"))
        estate = Estate(engine=world.engine, queues={"q": QueueConfig(preset="solid_queue")})
        profile = estate.profile("q")
        async with estate.connect() as conn:
            found = await profile.triage(conn, now=START, since=None, job_type=None)
            counted = await profile.triage(conn, now=START, since=None, job_type=None, exact=True)
        estimated = {s.status: s.count for s in found.by_status}
        assert estimated == {s.status: s.count for s in counted.by_status}
        assert (estimated["unknown"], "blocked" in estimated) == (1, False)
        assert [s.status for s in found.by_status if s.estimated] == ["finished"]


@pytest.mark.parametrize("kind", ADAPTERS, ids=lambda a: a.profile_class.name)
async def test_triage_counts_each_state_as_the_system_says_it(
    pg_url: str, kind: type[PresetAdapter]
) -> None:
    """Triage's counts per state are the jobs each state's own expression puts there,
    whether it counts them by a state column or, on a system without one, by each state's
    condition."""
    async for world in open_world(pg_url, kind):
        async with world.estate.connect() as conn:
            t = await world.profile.tables(conn)
            state = world.profile.state_value(t)
            found = await conn.execute(
                sa.select(state, sa.func.count()).select_from(world.profile.job(t).table)
                .group_by(state)
            )  # fmt: skip
            expected = {str(plain(s)): n for s, n in found.all()}
        triage = await _analysed_triage(world, exact=True)
        assert {s.status: s.count for s in triage.by_status} == expected
        assert triage.stuck == (1 if kind.shows_running else 0)


async def test_a_pg_boss_table_of_mostly_unfinished_jobs_is_counted_exactly(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the statistics put fewer than half of the jobs in ``completed``, there is
    little to save by not counting them: every state is counted."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    async for world in open_world(pg_url, PgBossAdapter):
        await _analyse(world)
        found = await _analysed_triage(world, exact=False)
        assert [s.status for s in found.by_status if s.estimated] == []
        assert {s.status: s.count for s in found.by_status}["completed"] == 2
