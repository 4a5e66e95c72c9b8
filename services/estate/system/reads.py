"""A preset's reads beyond triage (``SystemTriage``): /queue show, dlq and stuck, the
dead-letter and per-state counts, each kept to the queue's ``scope`` and read through the
system's facts its preset declares (``SystemBase``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import NotFound, UsageError
from services.estate.model import DeadFilter, DuplicateGroup, JobDetail, JobList, JobSummary
from services.estate.profile import as_utc, plain, row_dict
from services.estate.system.base import STATE, SystemBase
from services.estate.tables import BoundTable


class SystemReads(SystemBase):
    """The reads every preset shares (``SystemProfile`` adds its changes, staged redrives,
    triage and report)."""

    async def dead_rows_query(self, conn: AsyncConnection) -> sa.Select[tuple[int]]:
        t = await self.tables(conn)
        query = sa.select(sa.func.count()).where(
            self.in_states(t, self.dead_letter_statuses), *self.scope(t)
        )
        return query.select_from(self.job(t).table)

    async def status_counts(self, conn: AsyncConnection) -> dict[str, int]:
        t = await self.tables(conn)
        state = self.state_value(t)
        rows = (
            await conn.execute(
                sa.select(state, sa.func.count())
                .select_from(self.job(t).table)
                .where(*self.scope(t))
                .group_by(state)
            )
        ).all()
        return {str(plain(r[0])): int(r[1]) for r in rows}

    async def show(self, conn: AsyncConnection, *, job_id: str) -> JobDetail:
        t = await self.tables(conn)
        q = self.job(t)
        key = self.key_of(t, job_id)
        row = (
            await conn.execute(
                sa.select(q.table, self.state_value(t).label(STATE)).where(
                    q.c(self.cols.id) == key, *self.scope(t)
                )
            )
        ).first()
        if row is None:
            within = (
                f" (queue {self.config.queue_name!r} of {q.name})"
                if self.config.queue_name is not None
                else f" ({q.name})"
            )
            raise NotFound(f"no job {job_id} in queue {self.queue!r}{within}")
        data = row_dict(row)
        status = str(data.pop(STATE))
        events, note = await self.history(conn, t, row._mapping)
        return JobDetail(
            queue=self.queue,
            job_id=str(plain(row._mapping[q.c(self.cols.id).name])),
            status=status,
            canonical=self.canonical(status),
            row=data,
            sections=[],
            events=events,
            events_note=note,
        )

    def dead_where(
        self, tables: dict[str, BoundTable], filters: DeadFilter
    ) -> list[sa.ColumnElement[bool]]:
        where: list[sa.ColumnElement[bool]] = [
            self.in_states(tables, self.dead_letter_statuses),
            *self.scope(tables),
        ]
        if filters.tenant is not None:
            raise UsageError(
                f"queue {self.queue!r} ({self.system}) has no tenants; select by --error-like "
                "or --job-type instead"
            )
        if filters.reason is not None:
            raise UsageError(
                f"queue {self.queue!r} ({self.system}) keeps no failure reason; select by "
                "--error-like or --job-type instead"
            )
        if filters.job_type is not None:
            if self.cols.kind is None:
                raise UsageError(f"{self.system} keeps no job type; select by --error-like instead")
            where.append(self.col(tables, self.cols.kind) == filters.job_type)
        if filters.error_like is not None:
            error = self.error_text(tables)
            if error is None:
                raise UsageError(
                    f"--error-like selects nothing on queue {self.queue!r}: {self.no_error_text}; "
                    "name the job ids, or select by --job-type"
                )
            where.append(error.icontains(filters.error_like, autoescape=True))
        if filters.job_ids is not None:
            keys = [self.key_of(tables, j) for j in filters.job_ids]
            where.append(self.job(tables).isin(self.cols.id, keys))
        if filters.args_like is not None:  # last: a scan of the dead jobs the rest leave
            where.append(self.args_where(tables, filters.args_like))
        return where

    def summary(
        self, t: Mapping[str, BoundTable], m: Mapping[Any, Any], note: str | None = None
    ) -> JobSummary:
        """One job of a listing, from a row selected with ``summary_columns``."""
        status = str(plain(m["state"]))
        return JobSummary(
            id=str(plain(m["id"])),
            status=status,
            canonical=self.canonical(status),
            reason=None,
            error=m.get("error"),
            group=m.get("kind"),
            attempts=m.get("attempts"),
            at=as_utc(m.get("at")),
            note=note,
        )

    def summary_columns(
        self, t: Mapping[str, BoundTable], at: sa.ColumnElement[Any] | None
    ) -> list[sa.ColumnElement[Any]]:
        cols: list[sa.ColumnElement[Any]] = [
            self.col(t, self.cols.id).label("id"),
            self.state_value(t).label("state"),
            self.attempts_value(t).label("attempts"),
        ]
        if self.cols.kind is not None:
            cols.append(self.col(t, self.cols.kind).label("kind"))
        error = self.error_text(t)
        if error is not None:
            cols.append(error.label("error"))
        if at is not None:
            cols.append(at.label("at"))
        return cols

    async def dead(self, conn: AsyncConnection, *, filters: DeadFilter) -> JobList:
        t = await self.tables(conn)
        where = self.dead_where(t, filters)
        q = self.job(t)
        total = (
            await conn.execute(sa.select(sa.func.count()).select_from(q.table).where(*where))
        ).scalar_one()
        listing = (
            sa.select(*self.summary_columns(t, self.died_at(t)))
            .select_from(q.table)
            .where(*where)
            .order_by(*self.dead_order(t))
            .limit(filters.limit)
        )
        rows = [self.summary(t, r) for r in (await conn.execute(listing)).mappings().all()]
        return JobList(total=int(total), rows=rows)

    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList:
        t = await self.tables(conn)
        q = self.job(t)
        where = self.triage_reads.stuck_where(t, now)
        total = (
            await conn.execute(sa.select(sa.func.count()).select_from(q.table).where(*where))
        ).scalar_one()
        started = self.started_at(t)
        listing = (
            sa.select(*self.summary_columns(t, started))
            .select_from(q.table)
            .where(*where)
            .order_by(self.col(t, self.cols.id))
            .limit(limit)
        )
        rows = []
        for m in (await conn.execute(listing)).mappings().all():
            at = as_utc(m.get("at"))
            minutes = int((now - at).total_seconds() // 60) if at is not None else None
            note = f"running for {minutes} min" if minutes is not None else "running"
            rows.append(self.summary(t, m, note=note))
        return JobList(total=int(total), rows=rows)

    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]:
        raise UsageError(
            f"queue {self.queue!r} ({self.system}): {self.system} has its own unique jobs; "
            "queuebot does not judge duplicates there"
        )
