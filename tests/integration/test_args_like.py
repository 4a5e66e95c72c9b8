"""``--args-like TEXT``: finding jobs by the arguments they were enqueued with, on every
profile and preset that keeps them (queuebot's own on SQLite and PostgreSQL, the systems'
on PostgreSQL), and a clear refusal where a queue keeps none.

Each case builds its queue with 12 dead jobs whose arguments name invoices INV-104850 to
INV-104861 (so INV-104857 is one of them), a pending job with INV-104999, and jobs done;
then /queue dlq, a staged redrive and /queue show look for them as a person would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import Services
from commands.model import Dlq, Show
from services.changes import store as change_store
from services.changes.model import RequestState
from services.config import QueueConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.errors import UsageError
from services.estate.estate import Estate
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.estate.profile import QueueProfile
from services.reads import samples
from tests.helpers.people import ALICE
from tests.helpers.replies import read_reply
from tests.integration.adapted import create_tables, need, registry
from tests.integration.preset_adapters import PRESET_ADAPTERS, QueAdapter
from tests.integration.profile_adapters import Built, MessageJobAdapter, WorkerQueueAdapter
from tests.integration.single_table_profile import SingleTableAdapter
from tests.integration.support import START, Clock, RecordingNotifier, build_services
from tests.kinds import ChangeKind

QUEUE = "billing"
ERROR = "card declined by the acquirer"
INVOICES = [f"INV-1048{50 + i}" for i in range(12)]  # INV-104857 is the 8th dead job's
THE_ONE = 7
NO_ARGS = (
    "this queue's profile keeps no job arguments (no payload column bound); --args-like "
    "needs one — see docs/profiles.md"
)
ADAPTERS: list[Any] = [WorkerQueueAdapter, MessageJobAdapter, *PRESET_ADAPTERS]


@dataclass
class World:
    engine: AsyncEngine
    estate: Estate
    profile: QueueProfile
    adapter: Any
    built: Built
    services: Services

    async def dead_ids(self, **filters: Any) -> list[str]:
        async with self.estate.connect() as conn:
            found = await self.profile.dead(conn, filters=DeadFilter(limit=100, **filters))
        assert found.total == len(found.rows)
        return sorted(r.id for r in found.rows)

    async def reply(self, command: Any) -> str:
        """A read command's reply, rendered as the console prints it."""
        return await read_reply(self.estate, command)


async def open_world(db_url: str, kind: Any, dead: int = len(INVOICES)) -> World:
    engine = create_engine(db_url)
    await upgrade(engine)
    clock = Clock()
    estate = Estate(engine=engine, queues={QUEUE: kind.config()}, clock=clock, registry=registry())
    profile = estate.profile(QUEUE)
    adapter = kind(profile)
    async with engine.begin() as conn:
        await create_tables(conn, kind)
        built = await adapter.add(conn, now=START, dead=dead, error=ERROR, pending=1, done=1)
    services = build_services(engine, estate, clock, RecordingNotifier())
    return World(engine, estate, profile, adapter, built, services)


@pytest.fixture(params=ADAPTERS, ids=lambda a: a.profile_class.name)
async def world(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[World]:
    kind = request.param
    need(kind, db_url)
    w = await open_world(db_url, kind)
    async with w.engine.begin() as conn:
        for i, job in enumerate(w.built.dead):
            args: dict[str, Any] = {"invoice": INVOICES[i], "amount_cents": 1200 + i}
            if i == 0:
                args["memo"] = "promo 1048% off"
            if i == 1:
                args["memo"] = "receipt in a/b, C:\\pay"
            await w.adapter.give_args(conn, job, args)
        await w.adapter.give_args(conn, w.built.pending[0], {"invoice": "INV-104999"})
    yield w
    await w.engine.dispose()


async def test_dlq_finds_the_one_dead_job_whose_arguments_hold_the_text(world: World) -> None:
    the_one = [world.built.dead[THE_ONE]]
    assert await world.dead_ids(args_like="INV-104857") == the_one
    assert await world.dead_ids(args_like="inv-104857") == the_one  # case does not matter
    assert await world.dead_ids(args_like="INV-1049") == []  # only a pending job has it
    said = await world.reply(Dlq(args_like="INV-104857", queue=QUEUE))
    assert "Dead letters in queue billing: 1" in said and world.built.dead[THE_ONE] in said


async def test_args_like_combines_with_the_other_filters(world: World) -> None:
    if not world.adapter.error_text:
        pytest.skip("Procrastinate keeps no error text to filter by")
    the_one = [world.built.dead[THE_ONE]]
    assert await world.dead_ids(args_like="INV-104857", error_like="declined") == the_one
    assert await world.dead_ids(args_like="INV-104857", error_like="no such error") == []


async def test_like_metacharacters_in_the_text_match_literally(world: World) -> None:
    dead = world.built.dead
    assert await world.dead_ids(args_like="1048%") == [dead[0]]  # not "1048 and anything"
    assert await world.dead_ids(args_like="INV_104857") == []  # not "INV, any one, 104857"
    assert await world.dead_ids(args_like="a/b") == [dead[1]]
    assert await world.dead_ids(args_like=":\\") == [dead[1]]


async def test_a_staged_redrive_by_arguments_plans_exactly_the_matching_dead_jobs(
    world: World,
) -> None:
    async with world.engine.begin() as conn:  # the dead-letter count 15 minutes ago: flat
        await samples.record(conn, profile=world.profile, now=START - timedelta(minutes=15))
    view = await world.services.changes.request(
        kind=ChangeKind.PLAN,
        queue=QUEUE,
        selector=Selector(args_like="INV-10485"),  # INV-104850 ... INV-104859
        reason="the acquirer's outage is over",
        actor=ALICE,
    )
    assert view.state is RequestState.PENDING
    assert view.selector == "dead rows with arguments like 'INV-10485'"
    async with world.engine.connect() as conn:
        planned = await change_store.targets(conn, view.number)
    assert sorted(t.id for t in planned) == sorted(world.built.dead[:10])
    assert view.eligible == 10


async def test_show_by_arguments_shows_the_one_job_or_lists_the_matches(world: World) -> None:
    job = world.built.dead[THE_ONE]
    one = await world.reply(Show(args_like="INV-104857", queue=QUEUE))
    assert f"Job {job} in queue billing: " in one
    assert "The one job in queue billing whose arguments contain 'INV-104857'." in one
    assert "INV-104857" in one  # its row, arguments included

    several = await world.reply(Show(args_like="INV-1048", queue=QUEUE))
    assert "12 jobs in queue billing have arguments containing 'INV-1048'" in several
    assert "…and 2 more, not listed." in several
    assert "Narrow it with a longer or more distinctive part of the arguments" in several
    listed = [line for line in several.splitlines() if '"INV-1048' in line]
    assert len(listed) == 10  # each with the part of its arguments that matched

    pending = await world.reply(Show(args_like="INV-104999", queue=QUEUE))
    assert f"Job {world.built.pending[0]} in queue billing" in pending  # not only dead jobs

    none = await world.reply(Show(args_like="INV-200000", queue=QUEUE))
    assert "No job in queue billing has arguments containing 'INV-200000'" in none


@pytest.mark.parametrize("kind", [WorkerQueueAdapter], ids=["worker_queue"])
async def test_show_by_arguments_stops_counting_and_says_at_least(db_url: str, kind: Any) -> None:
    w = await open_world(db_url, kind, dead=1005)
    try:
        async with w.engine.begin() as conn:
            for i, job in enumerate(w.built.dead):
                await w.adapter.give_args(conn, job, {"order": f"ORD-{i:05d}"})
        said = await w.reply(Show(args_like="ORD-", queue=QUEUE))
    finally:
        await w.engine.dispose()
    assert "More than 1,000 jobs in queue billing have arguments containing 'ORD-'" in said
    assert "…and at least 991 more, not listed." in said


async def _refusals(w: World) -> list[str]:
    said = []
    with pytest.raises(UsageError) as dlq:
        await w.dead_ids(args_like="INV-104857")
    said.append(dlq.value.message)
    with pytest.raises(UsageError) as redrive:
        await w.services.changes.request(
            kind=ChangeKind.PLAN,
            queue=QUEUE,
            selector=Selector(args_like="INV-104857"),
            reason="the acquirer's outage is over",
            actor=ALICE,
        )
    said.append(redrive.value.message)
    with pytest.raises(UsageError) as show:
        await w.reply(Show(args_like="INV-104857", queue=QUEUE))
    said.append(show.value.message)
    return said


async def test_a_profile_that_keeps_no_arguments_refuses_saying_why(db_url: str) -> None:
    w = await open_world(db_url, SingleTableAdapter)
    try:
        said = await _refusals(w)
    finally:
        await w.engine.dispose()
    assert said == [f"queue 'billing': {NO_ARGS}"] * 3


async def test_a_team_table_without_a_payload_column_refuses_and_config_check_says_so(
    db_url: str,
) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    serial = "BIGSERIAL" if db_url.startswith("postgresql") else "INTEGER"
    async with engine.begin() as conn:
        await conn.exec_driver_sql(
            f"CREATE TABLE team_jobs (id {serial} PRIMARY KEY, status TEXT NOT NULL, "
            "error_message TEXT, queued_at TIMESTAMP NOT NULL, claimed_at TIMESTAMP)"
        )
    config = QueueConfig(profile="worker_queue", table="team_jobs")
    clock = Clock()
    estate = Estate(engine=engine, queues={QUEUE: config}, clock=clock)
    w = World(
        engine,
        estate,
        estate.profile(QUEUE),
        None,
        Built(),
        build_services(engine, estate, clock, RecordingNotifier()),
    )
    try:
        said = await _refusals(w)
        async with estate.connect() as conn:
            checked = await w.profile.describe(conn)
    finally:
        await engine.dispose()
    assert said == [f"queue 'billing': {NO_ARGS}"] * 3
    assert (
        "no column team_jobs.payload: no job arguments: --args-like (/queue dlq, /queue "
        "redrive, /queue show) is refused"
    ) in checked


async def test_a_team_payload_column_under_another_name_is_searched(db_url: str) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    pg = db_url.startswith("postgresql")
    async with engine.begin() as conn:
        await conn.exec_driver_sql(
            f"CREATE TABLE team_jobs (id {'BIGSERIAL' if pg else 'INTEGER'} PRIMARY KEY, "
            "status TEXT NOT NULL, error_message TEXT, queued_at TIMESTAMP NOT NULL, "
            f"claimed_at TIMESTAMP, params {'JSONB' if pg else 'TEXT'})"
        )
        await conn.exec_driver_sql(
            "INSERT INTO team_jobs (status, error_message, queued_at, params) VALUES "
            "('failed', 'declined', '2026-11-30 01:00:00', '{\"invoice\": \"INV-104857\"}'), "
            "('failed', 'declined', '2026-11-30 01:00:00', '{\"invoice\": \"INV-104858\"}')"
        )
    config = QueueConfig(
        profile="worker_queue", table="team_jobs", columns={"queue.payload": "params"}
    )
    estate = Estate(engine=engine, queues={QUEUE: config}, clock=Clock())
    try:
        async with estate.connect() as conn:
            found = await estate.profile(QUEUE).dead(
                conn, filters=DeadFilter(args_like="inv-104857")
            )
    finally:
        await engine.dispose()
    assert [r.id for r in found.rows] == ["1"]


@pytest.mark.postgres
async def test_ques_keyword_arguments_are_matched_with_its_args(pg_url: str) -> None:
    w = await open_world(pg_url, QueAdapter, dead=2)
    try:
        async with w.engine.begin() as conn:  # Que 2 keeps keyword arguments apart
            q = (await w.profile.tables(conn))["job"]
            await conn.execute(
                q.table.update()
                .where(q.c("id") == int(w.built.dead[1]))
                .values(kwargs={"invoice": "INV-104857"})
            )
        assert await w.dead_ids(args_like="INV-104857") == [w.built.dead[1]]
    finally:
        await w.engine.dispose()
