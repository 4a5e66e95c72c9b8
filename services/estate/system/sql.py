"""SQL shapes several systems share, built from reflected columns (never from text)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection


def last_error(errors: sa.Column[Any], key: str) -> sa.ColumnElement[Any]:
    """``key`` of the last element of a ``jsonb[]`` error history (River's and Oban's
    ``errors``): the latest attempt's error text."""
    last = errors[sa.func.array_length(errors, 1)]
    text: sa.ColumnElement[Any] = sa.type_coerce(last, postgresql.JSONB)[key].astext
    return text


def utc(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """A timestamp kept without a zone, in UTC (Oban's), as a moment."""
    return sa.func.timezone("UTC", column)


def utc_now() -> sa.ColumnElement[Any]:
    """Now, as a timestamp without a zone in UTC (what Oban writes)."""
    return sa.func.timezone("UTC", sa.func.now())


async def notify_each(
    conn: AsyncConnection, channel: str, payloads: Iterable[dict[str, Any]]
) -> None:
    """``pg_notify(channel, payload)`` for each distinct payload, in the caller's
    transaction: PostgreSQL delivers them when it commits, never if it rolls back."""
    texts = sorted({json.dumps(p, separators=(",", ":"), sort_keys=True) for p in payloads})
    if texts:
        await conn.execute(
            sa.text("SELECT pg_notify(:channel, p) FROM unnest(CAST(:texts AS text[])) AS p"),
            {"channel": channel, "texts": texts},
        )
