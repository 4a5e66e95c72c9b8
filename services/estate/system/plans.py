"""Staged redrives on a preset's jobs table: each wave's outcome in the system's states,
and the rollback that gives a job nobody picked up yet the values it had before (its
state, attempts and times, as the system's retry changed them)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import redrive_log
from services.estate.ops import Death, ItemRef, Selector, Target, WaveStatus, chunk_for, chunks
from services.estate.profile import as_utc, plain
from services.estate.system.base import KEPT
from services.estate.system.changes import failure_signature
from services.estate.tables import BoundTable
from services.estate.tally import WaveTally

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase


class SystemPlanOps:
    has_sources = False

    def __init__(self, profile: SystemBase) -> None:
        self.profile = profile

    async def candidate_query(self, conn: AsyncConnection, *, selector: Selector) -> sa.Select[Any]:
        p = self.profile
        t = await p.tables(conn)
        return (
            sa.select(p.col(t, p.cols.id))
            .where(*p.dead_where(t, selector.dead_filter()))
            .order_by(*p.dead_order(t))
        )

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        rows = await conn.execute(await self.candidate_query(conn, selector=selector))
        return [str(plain(r[0])) for r in rows.all()]

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        return {}  # a system's job carries its arguments, not a stored object

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        return await redrive_log.counts(
            conn, queue=self.profile.queue, job_ids=[t.id for t in targets]
        )

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        p = self.profile
        t = await p.tables(conn)
        q = p.job(t)
        ids = [p.key_of(t, i.job_id) for i in items]
        kept = [c for c in p.restored if q.has(c)]
        cols = [q.c(p.cols.id), *(q.c(c) for c in kept)]
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(ids, chunk_for(q.dialect)):
            rows = await conn.execute(sa.select(*cols).where(q.isin(p.cols.id, part)))
            for r in rows.all():
                out[str(plain(r[0]))] = dict(zip(kept, (plain(v) for v in r[1:]), strict=True))
            for job, extra in (await p.kept_elsewhere(conn, t, part)).items():
                out.setdefault(job, {}).update(extra)
        return out

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus:
        p = self.profile
        t = await p.tables(conn)
        q = p.job(t)
        ids = [p.key_of(t, i.job_id) for i in items]
        tally = WaveTally(p)
        signatures: dict[str, str] = {}
        error = p.error_text(t)
        cols: list[sa.ColumnElement[Any]] = [q.c(p.cols.id), p.state_value(t)]
        if error is not None:
            cols.append(error)
        for part in chunks(ids, chunk_for(q.dialect)):
            rows = await conn.execute(sa.select(*cols).where(q.isin(p.cols.id, part)))
            for r in rows.all():
                job, status = str(plain(r[0])), str(plain(r[1]))
                text = r[2] if error is not None else None
                if tally.add(job, status, text):
                    signatures[job] = failure_signature(text)
        # a job gone from the table is settled by the queue's rule (``deleted_jobs``)
        return tally.status(jobs=(i.job_id for i in items), signatures=signatures)

    def _unclaimed(self, t: Mapping[str, BoundTable], item: ItemRef) -> sa.ColumnElement[bool]:
        """A redriven job no worker picked up yet: in the state the retry wrote, with the
        attempts it left (a worker's pick-up counts an attempt, or moves it on)."""
        p = self.profile
        q = p.job(t)
        guard = [q.c(p.cols.id) == p.key_of(t, item.job_id), p.in_states(t, p.unclaimed_states)]
        attempts = item.original.get(p.cols.attempts)
        if attempts is not None:
            guard.append(p.attempts_value(t) == p.attempts_after_retry(int(attempts)))
        return sa.and_(*guard)

    async def unclaimed(self, conn: AsyncConnection, *, items: list[ItemRef]) -> list[str]:
        p = self.profile
        t = await p.tables(conn)
        q = p.job(t)
        out: list[str] = []
        for item in _returnable(items):
            row = await conn.execute(sa.select(q.c(p.cols.id)).where(self._unclaimed(t, item)))
            if row.first() is not None:
                out.append(item.job_id)
        return out

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        p = self.profile
        t = await p.tables(conn)
        q = p.job(t)
        back: list[str] = []
        for item in _returnable(items):  # each job goes back to its own earlier values
            values = {
                q.c(c).name: restored(q.c(c), item.original[c])
                for c in p.restored
                if q.has(c) and c in item.original
            }
            values.update({k: v for k, v in item.original.items() if k.startswith(KEPT)})
            if await p.restore(conn, t, self._unclaimed(t, item), values):
                back.append(item.job_id)
        return back

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        await redrive_log.record(conn, queue=self.profile.queue, job_ids=job_ids, now=now)

    async def dead_since(self, conn: AsyncConnection, *, since: datetime) -> list[Death] | None:
        """Jobs that died since ``since``, where the system records when a job died."""
        p = self.profile
        t = await p.tables(conn)
        died = p.died_at(t)
        if died is None:
            return None
        query = (
            sa.select(p.col(t, p.cols.id), died)
            .select_from(p.job(t).table)
            .where(p.in_states(t, p.dead_letter_statuses), died >= since, *p.scope(t))
        )
        rows = (await conn.execute(query)).all()
        return [Death(str(plain(job)), as_utc(at) or since) for job, at in rows]


def _returnable(items: list[ItemRef]) -> list[ItemRef]:
    return [i for i in items if i.original]


def restored(column: sa.Column[Any], value: Any) -> Any:
    """A value kept in a plan item's JSON, as the column takes it back: timestamps were
    kept as ISO text."""
    if isinstance(value, str) and isinstance(column.type, sa.DateTime):
        value = datetime.fromisoformat(value)
    naive = isinstance(column.type, sa.DateTime) and not column.type.timezone
    if naive and isinstance(value, datetime) and value.tzinfo is not None:  # kept in UTC
        return value.astimezone(UTC).replace(tzinfo=None)
    return value
