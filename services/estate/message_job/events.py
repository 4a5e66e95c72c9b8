"""The job events a message_job estate keeps, written by queuebot beside each change."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import PreconditionFailed
from services.estate.tables import BoundTable, text_array

REDRIVE_EVENT = "REDRIVE_REQUESTED"
CANCEL_EVENT = "CANCELLED"
ROLLBACK_EVENT = "REDRIVE_ROLLED_BACK"


def event_id(e: BoundTable) -> str | None:
    """What queuebot puts in a new event's id: None where the database makes it, "uuid"
    or "text" (a random UUID as the column's type) where the column has no default.
    An integer id without a default is refused: queuebot cannot choose one safely."""
    col = e.c("id")
    generated = col.server_default is not None or (
        isinstance(col.type, sa.Integer) and col.primary_key and e.dialect == "sqlite"
    )
    if generated:
        return None
    if isinstance(col.type, sa.Integer):
        raise PreconditionFailed(
            f"{e.name}.id is an integer column without a default; queuebot cannot choose "
            "event ids safely there: give it an identity default"
        )
    return "uuid" if isinstance(col.type, sa.Uuid) else "text"


async def insert_events(
    conn: AsyncConnection,
    e: BoundTable,
    *,
    jobs: list[Any],
    event_type: str,
    note: str,
    now: datetime,
) -> None:
    """One job event per job. job_events.id may have no default (the team's own
    procedure supplies it), so queuebot supplies a value of the column's type."""
    col = e.c("id")
    made = event_id(e)
    generated = made is None
    noted = e.has("message")  # without it, the events carry no note
    columns = ("aggregate_id", "event_type", "message", "created_at")
    names = [e.c(c).name for c in columns if c != "message" or noted]
    if e.dialect == "postgresql":  # one INSERT ... SELECT over the array of jobs
        agg = e.c("aggregate_id")
        texts = text_array([str(job) for job in jobs], agg.type)
        job = sa.func.unnest(texts).column_valued("job")
        values: list[Any] = [
            job,
            sa.literal(event_type),
            *([sa.literal(note)] if noted else []),
            sa.literal(now, sa.DateTime(timezone=True)),
        ]
        if not generated:
            new_id = sa.func.gen_random_uuid()
            values.insert(0, new_id if isinstance(col.type, sa.Uuid) else sa.cast(new_id, sa.Text))
            names.insert(0, col.name)
        await conn.execute(e.table.insert().from_select(names, sa.select(*values)))
        return
    rows = []
    for job in jobs:
        row = dict(zip(names, (job, event_type, *([note] if noted else []), now), strict=True))
        if not generated:
            new = uuid.uuid4()
            row[col.name] = new if isinstance(col.type, sa.Uuid) else str(new)
        rows.append(row)
    await conn.execute(e.table.insert(), rows)
