"""Staged redrives on a message_job estate: candidates, per-job checks, wave outcomes and
the rollback the redrive procedure prescribes (return the affected rows to the DLQ).

Where the estate keeps no ``job_events`` table, redrives are counted in queuebot's own
redrive log (as worker_queue's are); where it keeps no source objects, the source check
is n/a."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import redrive_log
from services.estate.message_job.events import REDRIVE_EVENT, ROLLBACK_EVENT, insert_events
from services.estate.message_job.schema import DLQ, FAILED, PENDING, QUEUED
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
from services.estate.profile import QueueProfile, as_utc, plain
from services.estate.tables import BoundTable
from services.estate.tally import WaveTally

DLQ_EVENT = "DLQ"  # the job event the estate writes when a message is dead-lettered
# What a redrive changes and a rollback puts back, where the team's tables have it.
MESSAGE_RESTORED = ("status", "attempt_count", "claimed_at", "last_error", "available_at")
JOB_RESTORED = ("status", "attempt_count", "progress_percent", "finished_at", "error_message")


def has_sources(tables: dict[str, BoundTable]) -> bool:
    """Whether the source-object check can run: jobs name an asset whose row keeps the
    source object's key."""
    assets = tables.get("assets")
    return tables["jobs"].has("asset_id") and assets is not None and assets.has("source_object_key")


class MessageJobPlanOps:
    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    @property
    def has_sources(self) -> bool:
        """Each job names its video_assets row, where the estate keeps them (known once
        the tables are reflected, which ``source_missing`` does first)."""
        tables = self.profile.reflected
        return tables is None or has_sources(tables)

    async def candidate_query(self, conn: AsyncConnection, *, selector: Selector) -> sa.Select[Any]:
        """Each job with a dead letter once, in the order of its newest dead letter: the
        database ranks the dead letters and keeps each job's first, so the ids can be
        read a page at a time without queuebot remembering which it has seen."""
        t = await self.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        ranked = (
            sa.select(
                m.c("job_id").label("job_id"),
                sa.func.row_number()
                .over(order_by=[*self.profile.dead_order(t), m.c("job_id")])
                .label("pos"),
            )
            .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
            .where(*self.profile.dead_where(t, selector.dead_filter()))
            .subquery("dead_letters")
        )
        return (
            sa.select(ranked.c.job_id).group_by(ranked.c.job_id).order_by(sa.func.min(ranked.c.pos))
        )

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        rows = await conn.execute(await self.candidate_query(conn, selector=selector))
        return [str(plain(r[0])) for r in rows.all()]

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        """Never redrive a job whose source object is gone (deleted by retention): the
        worker would only fail again."""
        t = await self.profile.tables(conn)
        if not has_sources(t):
            return {}  # n/a: this estate keeps no source objects queuebot can see
        j, a = t["jobs"], t["assets"]
        missing: dict[str, str] = {}
        ids = self.profile.id_texts(j.c("id"), (x.id for x in targets))
        status = a.c("status") if a.has("status") else sa.null()
        source_key = a.c("source_object_key")
        gone = sa.or_(  # only the jobs that fail come back, not every job named
            a.c("id").is_(None),
            source_key.is_(None),
            source_key == "",
            sa.func.upper(sa.cast(status, sa.Text)) == "DELETED",
        )
        for part in chunks(ids, chunk_for(j.dialect)):
            rows = await conn.execute(
                sa.select(j.c("id"), a.c("id"), source_key, status)
                .select_from(j.table.outerjoin(a.table, a.c("id") == j.c("asset_id")))
                .where(j.isin("id", part), gone)
            )
            for job, asset, key, asset_status in rows.all():
                if asset is None:
                    missing[str(plain(job))] = "source asset row is gone"
                elif not key:
                    missing[str(plain(job))] = "source object key is empty"
                elif str(asset_status).upper() == "DELETED":
                    missing[str(plain(job))] = f"source object {key} was deleted"
        return missing

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        """Earlier REDRIVE_REQUESTED events per job: queuebot's and operators' alike; or,
        without a job_events table, the redrives queuebot's own log recorded."""
        e = (await self.profile.tables(conn)).get("events")
        if e is None:
            return await redrive_log.counts(
                conn, queue=self.profile.queue, job_ids=[x.id for x in targets]
            )
        ids = self.profile.id_texts(e.c("aggregate_id"), (x.id for x in targets))
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
        kept_m = [c for c in MESSAGE_RESTORED if m.has(c)]
        kept_j = [c for c in JOB_RESTORED if j.has(c)]
        # keyed by message: a job may have two dead-lettered messages, each with its own values
        cols = [m.c("id"), *(m.c(c) for c in kept_m), *(j.c(c) for c in kept_j)]
        ids = self.profile.id_texts(m.c("id"), (str(i.part) for i in items))
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
                    "message": dict(zip(kept_m, values[: len(kept_m)], strict=True)),
                    "job": dict(zip(kept_j, values[len(kept_m) :], strict=True)),
                }
        return out

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus:
        m = (await self.profile.tables(conn))["messages"]
        ids = self.profile.id_texts(m.c("id"), (str(i.part) for i in items))
        tally = WaveTally(self.profile)
        for part in chunks(ids, chunk_for(m.dialect)):
            rows = await conn.execute(
                sa.select(m.c("job_id"), m.c("status"), m.c("last_error")).where(m.isin("id", part))
            )
            for job, status, error in rows.all():
                tally.add(str(plain(job)), str(plain(status)), error)
        # a dead letter's signature is its error's own (``changes._signature``): the
        # engine takes it from the error text, so no signatures are given here
        return tally.status(jobs=(i.job_id for i in items))

    async def unclaimed(self, conn: AsyncConnection, *, items: list[ItemRef]) -> list[str]:
        m = (await self.profile.tables(conn))["messages"]
        parts = (str(i.part) for i in _returnable(items))
        ids = self.profile.id_texts(m.c("id"), parts)
        out: list[str] = []
        for part in chunks(ids, chunk_for(m.dialect)):
            rows = await conn.execute(
                sa.select(m.c("job_id")).where(m.isin("id", part), _unclaimed(m))
            )
            out.extend(str(plain(r[0])) for r in rows.all())
        return out

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        """Redriven messages no worker claimed yet go back to DLQ and their jobs to
        FAILED, with the values they had, and a job event says so."""
        t = await self.profile.tables(conn)
        m, j, e = t["messages"], t["jobs"], t.get("events")
        back: list[str] = []
        for item in _returnable(items):
            assert item.original is not None and item.part is not None
            message = {"status": DLQ, **item.original["message"]}  # its own status, if kept
            moved = await conn.execute(
                m.table.update()
                .where(
                    m.c("id") == self.profile.coerce_id(m.c("id"), item.part),
                    _unclaimed(m),
                )
                .values(_restored(m, message))
                .returning(m.c("job_id"))
            )
            if moved.first() is None:
                continue  # a worker claimed it (or it moved on): leave it alone
            job = {"status": FAILED, **item.original["job"]}
            await conn.execute(
                j.table.update()
                .where(
                    j.c("id") == self.profile.coerce_id(j.c("id"), item.job_id),
                    j.c("status") == QUEUED,
                )
                .values(_restored(j, job))
            )
            back.append(item.job_id)
        if back and e is not None:  # one event per job, however many of its messages went back
            keys = [self.profile.coerce_id(j.c("id"), b) for b in dict.fromkeys(back)]
            await insert_events(conn, e, jobs=keys, event_type=ROLLBACK_EVENT, note=note, now=now)
        return back

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        """The REDRIVE_REQUESTED job events are the record; without a job_events table,
        queuebot's own redrive log is."""
        if "events" not in await self.profile.tables(conn):
            await redrive_log.record(conn, queue=self.profile.queue, job_ids=job_ids, now=now)

    async def dead_since(self, conn: AsyncConnection, *, since: datetime) -> list[Death] | None:
        """DLQ job events since ``since``: the estate writes one when a message dies. An
        estate that never wrote one does not record deaths that way (None)."""
        e = (await self.profile.tables(conn)).get("events")
        if e is None:  # no job events table: deaths are not recorded this way
            return None
        dlq = e.c("event_type") == DLQ_EVENT
        rows = await conn.execute(
            sa.select(e.c("aggregate_id"), e.c("created_at")).where(dlq, e.c("created_at") >= since)
        )
        died = [Death(str(plain(job)), as_utc(at) or since) for job, at in rows.all()]
        if died:
            return died
        ever = (await conn.execute(sa.select(e.c("id")).where(dlq).limit(1))).first()
        return [] if ever is not None else None


def _restored(t: BoundTable, values: dict[str, Any]) -> dict[str, Any]:
    """Kept values as the table's columns take them back, for the columns it has."""
    return {t.c(c).name: restored(c, v) for c, v in values.items() if t.has(c)}


def _returnable(items: list[ItemRef]) -> list[ItemRef]:
    """The items a rollback can return: those with their message and earlier values."""
    return [i for i in items if i.original and i.part is not None]


def _unclaimed(m: BoundTable) -> sa.ColumnElement[bool]:
    """A redriven message no worker claimed yet: what a rollback returns, and counts."""
    return sa.and_(m.c("status") == PENDING, m.c("claimed_at").is_(None))
