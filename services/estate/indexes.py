"""Recommended indexes for the user's queue tables (``queuebot estate indexes --print``).

queuebot never creates indexes on tables it does not own. This prints an optional,
reviewed migration; on PostgreSQL it uses CREATE INDEX CONCURRENTLY so it can run on a
live queue without blocking workers.
"""

from __future__ import annotations

from services.estate.profile import QueueProfile
from services.identifiers import quote_identifier


def recommended_indexes(profile: QueueProfile, dialect: str) -> list[str]:
    concurrently = " CONCURRENTLY" if dialect == "postgresql" else ""
    out: list[str] = []
    for role, name, columns, where, why in profile.index_plan():
        table = profile.table_name(role)
        cols = ", ".join(quote_identifier(profile.column_name(role, c)) for c in columns)
        clause = ""
        if where:
            col, values = where
            listed = ", ".join(f"'{v}'" for v in values)
            clause = f" WHERE {quote_identifier(profile.column_name(role, col))} IN ({listed})"
        index = f"qb_{profile.queue}_{name}"[:63]
        out.append(
            f"-- {why}\nCREATE INDEX{concurrently} IF NOT EXISTS {quote_identifier(index)} "
            f"ON {quote_identifier(table)} ({cols}){clause};"
        )
    return out
