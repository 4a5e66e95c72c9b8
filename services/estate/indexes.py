"""Recommended indexes for the user's queue tables (``queuebot estate indexes --print``).

queuebot never creates indexes on tables it does not own. This prints an optional,
reviewed migration; on PostgreSQL it uses CREATE INDEX CONCURRENTLY so it can run on a
live queue without blocking workers.
"""

from __future__ import annotations

from services.estate.profile import QueueProfile


def _quote(name: str) -> str:
    return ".".join(f'"{part}"' for part in name.split("."))


def recommended_indexes(profile: QueueProfile, dialect: str) -> list[str]:
    concurrently = " CONCURRENTLY" if dialect == "postgresql" else ""
    out: list[str] = []
    for role, name, columns, where, why in profile.index_plan():
        table = profile.table_name(role)
        cols = ", ".join(_quote(profile.column_name(role, c)) for c in columns)
        clause = ""
        if where:
            col, values = where
            listed = ", ".join(f"'{v}'" for v in values)
            clause = f" WHERE {_quote(profile.column_name(role, col))} IN ({listed})"
        index = f"qb_{profile.queue}_{name}"[:63]
        out.append(
            f"-- {why}\nCREATE INDEX{concurrently} IF NOT EXISTS {_quote(index)} "
            f"ON {_quote(table)} ({cols}){clause};"
        )
    return out
