"""queuebot's own record of the jobs it redrove (``qb_redrive_log``), for profiles whose
estate keeps no job events to count earlier redrives by. Steps in the caller's
transaction."""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import RedriveLog
from services.estate.ops import chunk_for, chunks

_log = cast(sa.Table, RedriveLog.__table__)


async def record(conn: AsyncConnection, *, queue: str, job_ids: list[str], now: datetime) -> None:
    if not job_ids:
        return
    if conn.dialect.name == "postgresql":
        # one statement over one array parameter: a redrive of 100,000 jobs is not a
        # hundred multi-row INSERTs of 3,000 parameters each
        ids = sa.func.unnest(sa.bindparam("job_ids", type_=postgresql.ARRAY(sa.Text)))
        await conn.execute(
            _log.insert().from_select(
                ["queue", "job_id", "at"],
                sa.select(
                    sa.bindparam("queue", type_=_log.c.queue.type),
                    ids,
                    sa.bindparam("at", type_=_log.c.at.type),
                ),
            ),
            {"queue": queue, "job_ids": list(job_ids), "at": now},
        )
        return
    await conn.execute(_log.insert(), [{"queue": queue, "job_id": j, "at": now} for j in job_ids])


async def counts(conn: AsyncConnection, *, queue: str, job_ids: list[str]) -> dict[str, int]:
    """How many times each job was redriven before, by queuebot."""
    out: dict[str, int] = {}
    for part in chunks(job_ids, chunk_for(conn.dialect.name)):
        rows = await conn.execute(
            sa.select(_log.c.job_id, sa.func.count())
            .where(_log.c.queue == queue, _log.c.job_id.in_(part))
            .group_by(_log.c.job_id)
        )
        out.update({str(j): int(n) for j, n in rows.all()})
    return out
