"""The independent read statements of one answer, run at once.

A triage is several counts over the same tables: the status counts, the oldest pending
row, the failure signatures, the duplicates. One after another on one connection, the
answer takes their sum, and the database works on one of them at a time: the small ones
leave the second core idle. On PostgreSQL ``read_all`` runs them on pooled connections
of their own, at the same time (how they are shared out: below), and every one of them
sees the same snapshot:
the caller's connection exports its snapshot (``pg_export_snapshot``) and each of the
others imports it (``SET TRANSACTION SNAPSHOT``, in a REPEATABLE READ transaction), the
way ``pg_dump`` reads in parallel. So the counts still add up to one another exactly, as
they did on one connection.

Only the heavy statements (the counts over the whole table, listed first) get a
connection each; the small ones (index lookups, a sample of rows) run one after another
on one more connection, with PostgreSQL's parallel workers off for them. On a host of
few cores every statement in flight, and every parallel worker, competes for the same
CPUs as the heavy counts: the small reads are done long before the heavy ones, so
fanning them out too only adds snapshot imports and worker start-ups that the answer
waits for.

At most one answer per engine fans out at a time; while one does, another reads its
statements one after another on its own connection. That bounds the connections taken
(the caller's, plus ``WIDTH``) and means a fan never waits on a connection that another
fan holds while waiting itself. SQLite, and a single statement, read on the caller's
connection as before. Every statement runs with PostgreSQL's JIT compilation off for its
transaction (why: at ``_NO_JIT``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable

WIDTH = 4  # statements of one answer in flight at once (connections beside the caller's)
_FANNING: set[int] = set()  # engines (by id) with a fan under way in this process
# These are index reads of milliseconds whose cost the planner can overestimate by far (a
# walk of a status index's distinct values is costed as a hundred statuses of a quarter of
# the table each); past jit_above_cost PostgreSQL would then spend ~90 ms compiling them.
_NO_JIT = "SET LOCAL jit = off"
_SNAPSHOT = re.compile(r"[0-9A-Fa-f]+-[0-9A-Fa-f]+(-[0-9]+)?")


async def read_all(
    conn: AsyncConnection, statements: Sequence[Executable], *, heavy: int | None = None
) -> list[Sequence[Row[Any]]]:
    """Every statement's rows, in the order given, all read in one snapshot.

    The first ``heavy`` statements (all of them when not given) each run on a connection
    of their own; the rest run one after another on one more connection."""
    engine = conn.engine
    key = id(engine.sync_engine)
    if conn.dialect.name != "postgresql":
        return [(await conn.execute(s)).all() for s in statements]
    if len(statements) < 2 or key in _FANNING:
        await conn.exec_driver_sql(_NO_JIT)
        return [(await conn.execute(s)).all() for s in statements]
    _FANNING.add(key)
    try:
        snapshot = str((await conn.execute(sa.text("SELECT pg_export_snapshot()"))).scalar_one())
        if not _SNAPSHOT.fullmatch(snapshot):  # it is quoted into SET TRANSACTION below
            raise ValueError(f"PostgreSQL exported an unexpected snapshot id {snapshot!r}")
        sync = conn.sync_connection
        given = sync.get_execution_options() if sync is not None else {}
        options = {k: v for k, v in given.items() if k != "isolation_level"}
        slots = asyncio.Semaphore(WIDTH)
        split = len(statements) if heavy is None else max(0, min(heavy, len(statements)))
        lanes = [[s] for s in statements[:split]]
        if statements[split:]:
            lanes.append(list(statements[split:]))

        async def lane(batch: list[Executable], serial: bool) -> list[Sequence[Row[Any]]]:
            async with slots, engine.connect() as fork:
                await fork.execution_options(**options, isolation_level="REPEATABLE READ")
                # One round trip: the snapshot first (it must come before any query), then
                # the settings; small reads get no parallel workers to compete with the
                # heavy ones.
                settings = [f"SET TRANSACTION SNAPSHOT '{snapshot}'", _NO_JIT]
                if serial:
                    settings.append("SET LOCAL max_parallel_workers_per_gather = 0")
                await fork.exec_driver_sql("; ".join(settings))
                return [(await fork.execute(s)).all() for s in batch]

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(lane(batch, serial=i >= split))
                    for i, batch in enumerate(lanes)
                ]
        except BaseExceptionGroup as failed:  # the first failure, as one statement's would be
            raise _first(failed) from None
        return [rows for t in tasks for rows in t.result()]
    finally:
        _FANNING.discard(key)


async def read_named(
    conn: AsyncConnection, statements: Mapping[str, Executable], *, heavy: Sequence[str]
) -> dict[str, Sequence[Row[Any]]]:
    """``read_all`` by name: the statements named in ``heavy`` each get a connection of
    their own, the rest share one."""
    order = [*heavy, *(name for name in statements if name not in heavy)]
    rows = await read_all(conn, [statements[name] for name in order], heavy=len(heavy))
    return dict(zip(order, rows, strict=True))


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    error = group.exceptions[0]
    return _first(error) if isinstance(error, BaseExceptionGroup) else error
