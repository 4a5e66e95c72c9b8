"""Staged redrives on a message_job estate: candidates, per-job checks, wave outcomes and
the rollback the redrive procedure prescribes (return the affected rows to the DLQ)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.message_job.events import REDRIVE_EVENT, ROLLBACK_EVENT, insert_events
from services.estate.ops import (
    ItemRef,
    Selector,
    Target,
    WaveStatus,
    chunk_for,
    chunks,
    restored,
)
from services.estate.profile import QueueProfile, plain

DLQ_EVENT = "DLQ"  # the job event the estate writes when a message is dead-lettered
MESSAGE_RESTORED = ("attempt_count", "claimed_at", "last_error", "available_at")
JOB_RESTORED = ("attempt_count", "progress_percent", "finished_at", "error_message")


class MessageJobPlanOps:
    has_sources = True  # each job names its video_assets row

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        t = await self.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        rows = await conn.execute(
            sa.select(m.c("job_id"))
            .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
            .where(*self.profile.dead_where(t, selector.dead_filter()))
            .order_by(*self.profile.dead_order(t), m.c("job_id"))
        )
        return list(dict.fromkeys(str(plain(r[0])) for r in rows.all()))

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        """Never redrive a job whose source object is gone (deleted by retention): the
        worker would only fail again."""
        t = await self.profile.tables(conn)
        j, a = t["jobs"], t["assets"]
        missing: dict[str, str] = {}
        ids = [self.profile.id_text(j.c("id"), x.id) for x in targets]
        for part in chunks(ids, chunk_for(j.dialect)):
            rows = await conn.execute(
                sa.select(j.c("id"), a.c("id"), a.c("source_object_key"), a.c("status"))
                .select_from(j.table.outerjoin(a.table, a.c("id") == j.c("asset_id")))
                .where(j.isin("id", part))
            )
            for job, asset, key, status in rows.all():
                if asset is None:
                    missing[str(plain(job))] = "source asset row is gone"
                elif not key:
                    missing[str(plain(job))] = "source object key is empty"
                elif str(status).upper() == "DELETED":
                    missing[str(plain(job))] = f"source object {key} was deleted"
        return missing

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        """Earlier REDRIVE_REQUESTED events per job: queuebot's and operators' alike."""
        e = (await self.profile.tables(conn))["events"]
        ids = [self.profile.id_text(e.c("aggregate_id"), x.id) for x in targets]
        counts: dict[str, int] = {}
        for part in chunks(ids, chunk_for(e.dialect)):
            rows = await conn.execute(
                sa.select(e.c("aggregate_id"), sa.func.count())
                .where(e.isin("aggregate_id", part), e.c("event_type") == REDRIVE_EVENT)
                .group_by(e.c("aggregate_id"))
            )
            counts.update({str(plain(job)): int(n) for job, n in rows.all()})
        return counts

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        t = await self.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        # keyed by message: a job may have two dead-lettered messages, each with its own values
        cols = [m.c("id"), *(m.c(c) for c in MESSAGE_RESTORED), *(j.c(c) for c in JOB_RESTORED)]
        ids = [self.profile.id_text(m.c("id"), str(i.part)) for i in items]
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(ids, chunk_for(m.dialect)):
            rows = await conn.execute(
                sa.select(*cols)
                .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
                .where(m.isin("id", part))
            )
            for r in rows.all():
                values = [plain(v) for v in r[1:]]
                out[str(plain(r[0]))] = {
                    "message": dict(zip(MESSAGE_RESTORED, values[:4], strict=True)),
                    "job": dict(zip(JOB_RESTORED, values[4:], strict=True)),
                }
        return out

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus:
        m = (await self.profile.tables(conn))["messages"]
        ids = [self.profile.id_text(m.c("id"), str(i.part)) for i in items]
        terminal = open_ = 0
        redead: list[tuple[str, str | None]] = []
        succeeded: list[str] = []
        for part in chunks(ids, chunk_for(m.dialect)):
            rows = await conn.execute(
                sa.select(m.c("job_id"), m.c("status"), m.c("last_error")).where(m.isin("id", part))
            )
            for job, status, error in rows.all():
                if status in ("COMPLETED", "DLQ"):
                    terminal += 1
                    if status == "DLQ":
                        redead.append((str(plain(job)), error))
                    else:
                        succeeded.append(str(plain(job)))
                else:
                    open_ += 1
        return WaveStatus(terminal=terminal, open=open_, redead=redead, succeeded=succeeded)

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        """Redriven messages no worker claimed yet go back to DLQ and their jobs to
        FAILED, with the values they had, and a job event says so."""
        t = await self.profile.tables(conn)
        m, j, e = t["messages"], t["jobs"], t["events"]
        back: list[str] = []
        for item in items:
            if not item.original or item.part is None:
                continue
            message = item.original["message"]
            moved = await conn.execute(
                m.table.update()
                .where(
                    m.c("id") == self.profile.coerce_id(m.c("id"), item.part),
                    m.c("status") == "PENDING",
                    m.c("claimed_at").is_(None),
                )
                .values(
                    {
                        m.c("status").name: "DLQ",
                        **{m.c(c).name: restored(c, message.get(c)) for c in MESSAGE_RESTORED},
                    }
                )
                .returning(m.c("job_id"))
            )
            if moved.first() is None:
                continue  # a worker claimed it (or it moved on): leave it alone
            job = item.original["job"]
            await conn.execute(
                j.table.update()
                .where(
                    j.c("id") == self.profile.coerce_id(j.c("id"), item.job_id),
                    j.c("status") == "QUEUED",
                )
                .values(
                    {
                        j.c("status").name: "FAILED",
                        **{j.c(c).name: restored(c, job.get(c)) for c in JOB_RESTORED},
                    }
                )
            )
            back.append(item.job_id)
        if back:  # one event per job, however many of its messages went back
            keys = [self.profile.coerce_id(j.c("id"), b) for b in dict.fromkeys(back)]
            await insert_events(conn, e, jobs=keys, event_type=ROLLBACK_EVENT, note=note, now=now)
        return back

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        return None  # the REDRIVE_REQUESTED job events are the record

    async def dead_since(self, conn: AsyncConnection, *, since: datetime) -> int | None:
        """DLQ job events since ``since``: the estate writes one when a message dies. An
        estate that never wrote one does not record deaths that way (None)."""
        e = (await self.profile.tables(conn))["events"]
        dlq = e.c("event_type") == DLQ_EVENT
        died = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(e.table)
                .where(dlq, e.c("created_at") >= since)
            )
        ).scalar_one()
        if died:
            return int(died)
        ever = (await conn.execute(sa.select(e.c("id")).where(dlq).limit(1))).first()
        return 0 if ever is not None else None
