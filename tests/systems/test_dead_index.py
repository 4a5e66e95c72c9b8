"""The partial index on a system's dead jobs, on each real system that ships none finding
them: `estate indexes` prints it, the printed SQL runs on the system's own schema (made by
its own tools), the reads of dead jobs triage and /queue dlq send then use it, and
`config check` says whether it is there.

Run as a team would run the printed file (psql, one statement at a time, outside a
transaction: CREATE INDEX CONCURRENTLY). The plans are read with sequential scans off: a
table of a dozen jobs is read whole either way, and the question is whether PostgreSQL
can use the index for the statement queuebot sends, as it would on a large table.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from services.config import QueueConfig
from services.db import create_engine
from services.estate.estate import Estate
from services.estate.indexes import dead_jobs_index
from services.estate.model import DeadFilter
from services.estate.system.dead_index import statements
from testkit.systems import System
from tests.conftest import _pg_conninfo, postgres_database
from tests.helpers.systems import real_system

QUEUES = {"emails": (2, 3), "reports": (1, 2)}
# The index each system gets, and the WHERE its reads select dead jobs by (triage's).
EXPECTED = {
    "pg-boss": ('ON ONLY "pgboss"."job" ("name", "completed_on")', "state IN ('failed')"),
    "graphile-worker": (
        'ON "graphile_worker"."_private_jobs" ("job_queue_id", "updated_at")',
        "attempts >= max_attempts AND locked_at IS NULL",
    ),
    "good_job": (
        'ON "public"."good_jobs" ("queue_name", "finished_at")',
        "finished_at IS NOT NULL AND error IS NOT NULL",
    ),
    "que": ('ON "public"."que_jobs" ("queue", "expired_at")', "expired_at IS NOT NULL"),
    "procrastinate": ('ON "public"."procrastinate_jobs" ("queue_name")', "status IN ('failed')"),
}
NAMES = {
    "pg-boss": "qb_job_dead",
    "graphile-worker": "qb_private_jobs_dead",
    "good_job": "qb_good_jobs_dead",
    "que": "qb_que_jobs_dead",
    "procrastinate": "qb_procrastinate_jobs_dead",
}


class Sent:
    """The statements an engine sends, with their parameters, while ``on``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.on = False
        self.seen: list[tuple[str, Any]] = []
        event.listen(engine.sync_engine, "before_cursor_execute", self._before)

    def _before(self, conn: Any, cursor: Any, sql: str, params: Any, *args: Any) -> None:
        if self.on:
            self.seen.append((sql, params))


def _dead_reads(seen: list[tuple[str, Any]], where: str) -> list[tuple[str, Any]]:
    """The statements that read dead jobs alone, the dead condition's column in them: the
    lists ordered by when the jobs died (triage's newest dead jobs' errors, /queue dlq's
    listing) and the counts (dlq's); not the counts of every job (GROUP BY)."""
    flat = [(" ".join(sql.split()), params) for sql, params in seen]
    first = where.split(" ", maxsplit=1)[0]
    return [
        (sql, p)
        for sql, p in flat
        if f".{first} " in sql
        and "GROUP BY" not in sql
        and (" ORDER BY " in sql or sql.startswith("SELECT count(*)"))
    ]


async def _plan(engine: AsyncEngine, sql: str, params: Any) -> str:
    async with engine.connect() as conn:
        await conn.exec_driver_sql("SET enable_seqscan = off")
        rows = await conn.exec_driver_sql("EXPLAIN " + sql, params or None)
        return "\n".join(r[0] for r in rows.all())


def _run(url: str, printed: list[str]) -> None:
    """The printed file as psql runs it: each statement alone, in autocommit."""
    with psycopg.connect(url, autocommit=True) as conn:
        for line in printed:
            if not line.startswith("--"):
                conn.execute(line)


class World:
    def __init__(self, name: str, system: System, url: str, sa_url: str) -> None:
        self.name, self.system, self.url = name, system, url
        self.engine = create_engine(sa_url)
        one = QueueConfig(preset=name, queue_name="emails")  # one queue of the table
        whole = QueueConfig(preset=name)  # every queue of it
        self.estate = Estate(engine=self.engine, queues={"mail": one, "all": whole})
        self.profile = self.estate.profile("mail")
        self.sent = Sent(self.engine)

    async def printed(self) -> list[str]:
        async with self.estate.connect() as conn:
            found = await dead_jobs_index(conn, self.profile, await self.profile.tables(conn))
        assert found is not None
        return statements(found)

    async def said(self) -> str:
        async with self.estate.connect() as conn:
            return "\n".join(await self.profile.describe(conn))

    async def dead_reads(self) -> list[tuple[str, Any]]:
        """What triage and /queue dlq send that reads the dead jobs alone, on one queue of
        the table and on all of it."""
        self.sent.seen.clear()
        self.sent.on = True
        try:
            async with self.estate.connect() as conn:
                now = datetime.now(UTC)
                for queue in ("mail", "all"):
                    profile = self.estate.profile(queue)
                    await profile.triage(conn, now=now, since=None, job_type=None)
                    await profile.dead(conn, filters=DeadFilter(limit=100))
        finally:
            self.sent.on = False
        return _dead_reads(self.sent.seen, EXPECTED[self.name][1])


@pytest.fixture(params=sorted(EXPECTED))
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    name: str = request.param
    system = real_system(name)
    for sa_url in postgres_database("empty"):
        url = _pg_conninfo(sa_url)
        await asyncio.to_thread(system.build, url, queues=QUEUES)
        w = World(name, system, url, sa_url)
        try:
            yield w
        finally:
            await w.engine.dispose()


@pytest.mark.postgres
async def test_the_dead_jobs_index_runs_on_the_real_schema_and_the_dead_reads_use_it(
    world: World,
) -> None:
    name, index = world.name, NAMES[world.name]
    on, where = EXPECTED[name]

    printed = await world.printed()
    create = next(s for s in printed if s.startswith("CREATE INDEX"))
    assert create.startswith(f"CREATE INDEX{'' if name == 'pg-boss' else ' CONCURRENTLY'} ")
    assert f'IF NOT EXISTS "{index}" {on} WHERE {where};' in create
    comments = "\n".join(s for s in printed if s.startswith("--"))
    assert "Optional" in comments and "queuebot never creates an index on it" in comments
    assert "not made per queue_name" in comments or "one per queue_name" in comments

    said = await world.said()
    assert f"dead jobs: no index finds them ({world.profile.system} ships none" in said
    assert f"the partial index {index} is not on" in said

    # Without the index, nothing finds the dead jobs but a scan.
    before = await world.dead_reads()
    # triage's newest errors (not Procrastinate's: it keeps no error text), dlq's count
    # and listing; on one queue and on the whole table
    assert len(before) == 2 * (2 if name == "procrastinate" else 3), before
    for sql, params in before:
        assert "qb_" not in await _plan(world.engine, sql, params)

    _run(world.url, printed)
    again = await world.printed()  # the printed file runs twice: nothing is made twice
    _run(world.url, again)

    said = await world.said()
    assert f"dead jobs: index {index} on " in said and "finds them" in said
    after = await world.dead_reads()
    assert [sql for sql, _ in after] == [sql for sql, _ in before]
    for sql, params in after:
        plan = await _plan(world.engine, sql, params)
        assert re.search(rf"(using|Bitmap Index Scan on) {index}", plan), f"{sql}\n{plan}"

    # What it reads is still the queue's dead jobs, the same as before.
    async with world.estate.connect() as conn:
        dead = await world.profile.dead(conn, filters=DeadFilter(limit=100))
    assert dead.total == 3


@pytest.mark.postgres
async def test_config_check_finds_an_index_by_its_where_and_says_one_is_not_valid(
    world: World,
) -> None:
    if world.name != "pg-boss":
        # One made by hand under another name, its WHERE written as PostgreSQL keeps it.
        _, where = EXPECTED[world.name]
        table = EXPECTED[world.name][0].split(" (")[0].removeprefix("ON ")
        kept = where.replace(" IN ('failed')", " = 'failed'")
        with psycopg.connect(world.url, autocommit=True) as conn:
            conn.execute(f"CREATE INDEX our_dead_jobs ON {table} (id) WHERE ({kept})")
        said = await world.said()
        shown = table.replace('"', "")
        assert f"dead jobs: index our_dead_jobs on {shown} finds them" in said
        return
    # pg-boss's table is partitioned: the index on the table alone is not valid until every
    # partition's is attached, and config check says so.
    printed = await world.printed()
    _run(world.url, [s for s in printed if "ON ONLY" in s])
    said = await world.said()
    assert "dead jobs: index qb_job_dead on pgboss.job is there but not valid" in said
    _run(world.url, printed)
    assert "dead jobs: index qb_job_dead on pgboss.job finds them" in await world.said()


@pytest.mark.postgres
async def test_the_index_is_made_where_the_presets_schema_says() -> None:
    for sa_url in postgres_database("empty"):
        url = _pg_conninfo(sa_url)
        await asyncio.to_thread(real_system("que").build, url, queues=QUEUES)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA jobs")
            conn.execute("ALTER TABLE que_jobs SET SCHEMA jobs")
        engine = create_engine(sa_url)
        try:
            config = QueueConfig.model_validate({"preset": "que", "schema": "jobs"})
            estate = Estate(engine=engine, queues={"mail": config})
            profile = estate.profile("mail")
            async with estate.connect() as conn:
                found = await dead_jobs_index(conn, profile, await profile.tables(conn))
            assert found is not None
            printed = statements(found)
            assert (
                'CREATE INDEX CONCURRENTLY IF NOT EXISTS "qb_que_jobs_dead" ON "jobs"."que_jobs" '
                '("queue", "expired_at") WHERE expired_at IS NOT NULL;'
            ) in printed
            _run(url, printed)
            async with estate.connect() as conn:
                said = "\n".join(await profile.describe(conn))
            assert "dead jobs: index qb_que_jobs_dead on jobs.que_jobs finds them" in said
            with psycopg.connect(url) as conn:
                where = conn.execute(
                    "SELECT schemaname FROM pg_indexes WHERE indexname = 'qb_que_jobs_dead'"
                ).fetchall()
            assert where == [("jobs",)]
        finally:
            await engine.dispose()
