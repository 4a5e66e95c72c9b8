"""A triage's statements read at once on PostgreSQL, on connections of their own, and all
in one snapshot: a row committed while they run is in none of them, so the counts of one
answer still agree with one another exactly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import create_engine
from services.estate.at_once import WIDTH, read_all

COUNT = sa.text("SELECT count(*), pg_backend_pid() FROM t")
SLOW_COUNT = sa.text("SELECT (SELECT count(*) FROM t), pg_backend_pid() FROM pg_sleep(0.6)")


@pytest.fixture
async def engine(pg_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(pg_url)
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE t (id serial PRIMARY KEY)"))
        await conn.execute(sa.text("INSERT INTO t SELECT FROM generate_series(1, 10)"))
    yield engine
    await engine.dispose()


@pytest.mark.postgres
async def test_one_snapshot_on_connections_of_their_own(engine: AsyncEngine) -> None:
    async def insert_meanwhile() -> None:
        await asyncio.sleep(0.2)
        async with engine.begin() as conn:
            await conn.execute(sa.text("INSERT INTO t SELECT FROM generate_series(1, 5)"))

    async with engine.connect() as conn:
        own = (await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
        writer = asyncio.create_task(insert_meanwhile())
        # the last statement waits for a free connection until the insert has committed
        *slow, last = await read_all(conn, [SLOW_COUNT] * WIDTH + [COUNT])
        await writer
    assert writer.done()
    assert [r[0][0] for r in slow] == [10] * WIDTH  # the 5 rows committed meanwhile:
    assert last[0][0] == 10  # in none of them, not even in the one that began after
    assert own not in {r[0][1] for r in [*slow, last]}
    assert len({r[0][1] for r in slow}) == WIDTH  # each statement had a connection
    async with engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 15


@pytest.mark.postgres
async def test_a_second_answer_meanwhile_reads_on_its_own_connection(engine: AsyncEngine) -> None:
    async def second() -> set[int]:
        await asyncio.sleep(0.2)  # the first fan is under way
        async with engine.connect() as conn:
            own = (await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
            rows = await read_all(conn, [COUNT, COUNT])
        return {own, *(r[0][1] for r in rows)}

    async with engine.connect() as conn:
        other = asyncio.create_task(second())
        first = await read_all(conn, [SLOW_COUNT, COUNT])
        pids = await other
    assert first[0][0][0] == 10
    assert len(pids) == 1  # no fan while one is under way: bounded connections, no waiting


@pytest.mark.postgres
async def test_a_failing_statement_fails_the_answer_with_its_own_error(
    engine: AsyncEngine,
) -> None:
    async with engine.connect() as conn:
        with pytest.raises(ProgrammingError, match="no_such_table"):
            await read_all(conn, [COUNT, sa.text("SELECT count(*) FROM no_such_table")])
    async with engine.connect() as conn:  # and the next answer fans out again
        own = (await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
        rows = await read_all(conn, [COUNT, COUNT])
    assert own not in {r[0][1] for r in rows}


async def test_sqlite_reads_one_after_another(tmp_path: object) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/t.db")
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
            await conn.execute(sa.text("INSERT INTO t (id) VALUES (1), (2), (3)"))
        async with engine.connect() as conn:
            rows = await read_all(
                conn, [sa.text("SELECT count(*) FROM t"), sa.text("SELECT max(id) FROM t")]
            )
        assert [r[0][0] for r in rows] == [3, 3]
    finally:
        await engine.dispose()
