"""Staged redrives on a worker_queue table: failed and failed_permanently rows back to
queued, a wave's outcome, and the rollback that gives each row its earlier values."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import redrive_log
from services.estate.ops import (
    Death,
    ItemRef,
    Selector,
    Target,
    WaveStatus,
    chunk_for,
    chunks,
    restored,
)
from services.estate.profile import QueueProfile, plain
from services.estate.tables import BoundTable
from services.estate.tally import WaveTally
from services.estate.worker_queue.changes import EARLIER_UNLABELLED, failure_signature
from services.estate.worker_queue.schema import QUEUED

# What a redrive changes and a rollback puts back, where the team's table has it.
RESTORED = (
    "status",
    "retry_count",
    "failure_reason",
    "error_message",
    "next_attempt_at",
    "server_node",
    "claimed_at",
    "started_at",
)


class WorkerQueuePlanOps:
    has_sources = False

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    async def _table(self, conn: AsyncConnection) -> BoundTable:
        return (await self.profile.tables(conn))["queue"]

    async def candidate_query(self, conn: AsyncConnection, *, selector: Selector) -> sa.Select[Any]:
        t = await self.profile.tables(conn)
        return (
            sa.select(t["queue"].c("id"))
            .where(*self.profile.dead_where(t, selector.dead_filter()))
            .order_by(*self.profile.dead_order(t))
        )

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        rows = await conn.execute(await self.candidate_query(conn, selector=selector))
        return [str(plain(r[0])) for r in rows.all()]

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        return {}  # a worker_queue job names an issue, not a stored object

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        return await redrive_log.counts(
            conn, queue=self.profile.queue, job_ids=[t.id for t in targets]
        )

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        q = await self._table(conn)
        ids = [self.profile.coerce_id(q.c("id"), i.job_id) for i in items]
        kept = [c for c in RESTORED if q.has(c)]
        cols = [q.c("id"), *(q.c(c) for c in kept)]
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(ids, chunk_for(q.dialect)):
            for r in (await conn.execute(sa.select(*cols).where(q.isin("id", part)))).all():
                out[str(plain(r[0]))] = dict(zip(kept, (plain(v) for v in r[1:]), strict=True))
        return out

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus:
        q = await self._table(conn)
        ids = [self.profile.coerce_id(q.c("id"), i.job_id) for i in items]
        tally = WaveTally(self.profile)
        signatures: dict[str, str] = {}
        earlier: dict[str, str] = {}
        cols = [q.c("id"), q.c("status"), q.c("error_message")]
        if q.has("failure_reason"):
            cols.append(q.c("failure_reason"))
        for part in chunks(ids, chunk_for(q.dialect)):
            rows = await conn.execute(sa.select(*cols).where(q.isin("id", part)))
            for r in rows.mappings().all():
                job = str(plain(r[q.c("id").name]))
                status = str(plain(r[q.c("status").name]))
                if tally.add(job, status, r[q.c("error_message").name]):
                    signatures[job] = failure_signature(q, r)  # as the frozen one
                    if not q.has("failure_reason"):
                        earlier[job] = EARLIER_UNLABELLED + signatures[job]
        return tally.status(
            jobs=(i.job_id for i in items), signatures=signatures, earlier_signatures=earlier
        )

    async def unclaimed(self, conn: AsyncConnection, *, items: list[ItemRef]) -> list[str]:
        q = await self._table(conn)
        ids = [self.profile.coerce_id(q.c("id"), i.job_id) for i in _returnable(items)]
        out: list[str] = []
        for part in chunks(ids, chunk_for(q.dialect)):
            rows = await conn.execute(sa.select(q.c("id")).where(q.isin("id", part), _unclaimed(q)))
            out.extend(str(plain(r[0])) for r in rows.all())
        return out

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        q = await self._table(conn)
        back: list[str] = []
        for item in _returnable(items):  # each row goes back to its own earlier values
            assert item.original is not None
            values = {
                q.c(c).name: restored(c, item.original[c])
                for c in RESTORED
                if q.has(c) and c in item.original
            }
            done = await conn.execute(
                q.table.update()
                .where(
                    q.c("id") == self.profile.coerce_id(q.c("id"), item.job_id),
                    _unclaimed(q),
                )
                .values(values)
                .returning(q.c("id"))
            )
            if done.first() is not None:
                back.append(item.job_id)
        return back

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        await redrive_log.record(conn, queue=self.profile.queue, job_ids=job_ids, now=now)

    async def dead_since(self, conn: AsyncConnection, *, since: datetime) -> list[Death] | None:
        return None  # the table keeps no record of when a row failed


def _returnable(items: list[ItemRef]) -> list[ItemRef]:
    """The items a rollback can return: those with their earlier values."""
    return [i for i in items if i.original]


def _unclaimed(q: BoundTable) -> sa.ColumnElement[bool]:
    """A redriven row no worker claimed yet: what a rollback returns, and counts."""
    return sa.and_(q.c("status") == QUEUED, q.c("claimed_at").is_(None))
