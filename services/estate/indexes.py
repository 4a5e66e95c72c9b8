"""Recommended indexes for the user's queue tables (``queuebot estate indexes --print``).

queuebot never creates indexes on tables it does not own. This prints an optional,
reviewed migration; on PostgreSQL it uses CREATE INDEX CONCURRENTLY so it can run on a
live queue without blocking workers. Given the tables as reflected, an index on a table
or column the team's estate does not have is left out, with a comment saying so, rather
than printed as a statement that would fail. A preset's system ships the indexes its
workers need; where none of them finds its dead jobs, a partial index on exactly those is
recommended (``dead_jobs_index``).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.profile import QueueProfile
from services.estate.system import dead_index
from services.estate.system.base import SystemBase
from services.estate.system.dead_index import DeadIndex
from services.estate.tables import BoundTable
from services.identifiers import quote_identifier


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def recommended_indexes(
    profile: QueueProfile, dialect: str, *, tables: Mapping[str, BoundTable] | None = None
) -> list[str]:
    """The CREATE INDEX statements, each after a comment saying what it serves;
    ``tables``: the estate's tables as reflected (None: not checked, all are printed)."""
    concurrently = " CONCURRENTLY" if dialect == "postgresql" else ""
    out: list[str] = []
    for role, name, columns, where, why in profile.index_plan():
        table = profile.table_name(role)
        index = f"qb_{profile.queue}_{name}"[:63]
        if tables is not None:
            bound = tables.get(role)
            if bound is None:
                out.append(f"-- {index} left out: there is no {role} table ({table}) here")
                continue
            needed = [*columns, *([where[0]] if where else [])]
            absent = [profile.column_name(role, c) for c in needed if not bound.has(c)]
            if absent:
                out.append(f"-- {index} left out: {table} has no column {', '.join(absent)}")
                continue
        cols = ", ".join(quote_identifier(profile.column_name(role, c)) for c in columns)
        clause = ""
        if where:
            col, values = where
            listed = ", ".join(_literal(v) for v in values)
            clause = f" WHERE {quote_identifier(profile.column_name(role, col))} IN ({listed})"
        out.append(
            f"-- {why}\nCREATE INDEX{concurrently} IF NOT EXISTS {quote_identifier(index)} "
            f"ON {quote_identifier(table)} ({cols}){clause};"
        )
    return out


async def dead_jobs_index(
    conn: AsyncConnection, profile: QueueProfile, tables: Mapping[str, BoundTable]
) -> DeadIndex | None:
    """On a preset whose system ships no index that finds its dead jobs, the partial index
    on them to recommend (services/estate/system/dead_index.py); else None."""
    if not isinstance(profile, SystemBase):
        return None
    return await dead_index.recommend(conn, profile, tables)


def unread_dead_index(profile: QueueProfile) -> list[str]:
    """Where the tables could not be read: that index is made from them as they are."""
    if not isinstance(profile, SystemBase) or profile.dead_index_columns is None:
        return []
    return [
        f"-- {profile.system} ships no index that finds its dead jobs; the partial index "
        "queuebot recommends on them is made from its table as it is (its columns, its "
        "partitions), which could not be read here"
    ]
