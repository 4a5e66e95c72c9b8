"""Guarded changes on a message_job estate: the redrive procedure's step that puts a
dead-lettered message back to PENDING and its FAILED job back to QUEUED, with a
REDRIVE_REQUESTED job event, made set-based; and the cancel of a dead-lettered job.

Statuses are judged by their canonical state (so a team's [statuses] values count), the
guard holds each row to the exact status it was frozen in, and columns or tables the
team's estate lacks are neither read nor reset."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit.row_digest import Digest
from services.errors import UsageError
from services.estate.message_job import kept
from services.estate.message_job.events import CANCEL_EVENT, REDRIVE_EVENT, insert_events
from services.estate.message_job.found import (
    JOB_PREFIX,
    NOT_KEPT,
    Found,
    Layout,
    as_text,
    frozen_state,
    id_kind,
    once,
    row_json,
    signature_of,
    versions,
)
from services.estate.message_job.kept import RESET_JOB
from services.estate.message_job.schema import CANCELLED, JOB_STATES, PENDING, QUEUED
from services.estate.model import CanonicalState
from services.estate.ops import (
    Action,
    Applied,
    Frozen,
    Ineligible,
    Kept,
    Selector,
    Target,
    chunk_for,
    chunks_of_whole,
)
from services.estate.profile import QueueProfile, plain
from services.estate.tables import BoundTable
from services.jsonable import raw_json


class MessageJobChanges:
    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile
        self.job_states = profile.mapped_states(JOB_STATES)

    def job_state(self, status: str) -> CanonicalState:
        return self.job_states.get(status, CanonicalState.UNKNOWN)

    async def freeze(self, conn: AsyncConnection, *, action: Action, selector: Selector) -> Frozen:
        if action is Action.REQUEUE:
            raise UsageError(
                f"requeue resets failed worker_queue rows to queued; queue "
                f"{self.profile.queue!r} is message_job: use /queue redrive ID --reason ..."
            )
        if selector.duplicates or selector.failure_reason is not None:
            raise UsageError(
                f"--duplicates and --failure-reason apply to worker_queue queues; queue "
                f"{self.profile.queue!r} is message_job: name the job ids"
            )
        t = await self.profile.tables(conn)  # reflected first: the check reads its types
        self.profile.check_writable(action)
        m, j = t["messages"], t["jobs"]
        job_keys = self.profile.id_texts(j.c("id"), selector.ids)
        msg_keys = (
            job_keys  # the same text when both ids are of one kind (as they usually are)
            if id_kind(j.c("id")) == id_kind(m.c("id"))
            else self.profile.id_texts(m.c("id"), selector.ids)
        )
        found = await self._lookup(
            conn, m, j, job_keys, None if selector.ids_name_jobs else msg_keys
        )
        by_job: dict[str, Found | list[Found]] = {}  # a list only where a job has several
        for f in found:
            had = by_job.setdefault(f.job_id, f)
            if had is not f:
                by_job[f.job_id] = [*had, f] if isinstance(had, list) else [had, f]
        # messages by id, only where an id names no job (ids usually name jobs)
        by_msg: dict[str, Found] = (
            {f.message_id: f for f in found} if any(k not in by_job for k in job_keys) else {}
        )
        del found
        targets: list[Target] = []
        ineligible: list[Ineligible] = []
        seen: set[str] = set()
        state_texts: dict[tuple[str, str], str] = {}
        for raw, job_key, msg_key in zip(selector.ids, job_keys, msg_keys, strict=True):
            # an id names a job, or else one of its messages
            named = by_job.get(job_key) or by_msg.get(msg_key)
            candidates = named if isinstance(named, list) else [named] if named else []
            if not candidates:
                ineligible.append(Ineligible(raw, "not found (no job or message with that id)"))
                continue
            job_id = candidates[0].job_id
            if job_id in seen:
                continue
            seen.add(job_id)
            job_status = candidates[0].job_status
            job_state = self.job_state(job_status)
            dead = [
                c for c in candidates if self.profile.canonical(c.status) is CanonicalState.DEAD
            ]
            if job_state is CanonicalState.CANCELLED:
                ineligible.append(Ineligible(job_id, f"{job_status}: cancelled on purpose"))
            elif not dead:
                states = "/".join(sorted({c.status for c in candidates}))
                ineligible.append(Ineligible(job_id, f"{job_status}/{states}: not dead-lettered"))
            elif job_state is not CanonicalState.FAILED:
                ineligible.append(Ineligible(job_id, f"{job_status}: job is not failed"))
            else:
                targets.extend(d.target(state_texts) for d in dead)
        return Frozen(targets, ineligible)

    async def _lookup(
        self,
        conn: AsyncConnection,
        m: BoundTable,
        j: BoundTable,
        job_keys: list[Any],
        keys: list[Any] | None,
    ) -> list[Found]:
        """Every message whose id, or whose job's id, is named, with its job's row (by its
        job's id alone where ``keys`` is None)."""
        postgres = m.dialect == "postgresql"
        layout = Layout.of(m, j)
        columns: list[Any] = (
            [  # no image: the request copies it into its items (``kept``)
                as_text(m.c("id"), postgres),
                as_text(m.c("job_id"), postgres),
                m.c("status"),
                m.c("last_error"),
                j.c("status"),
                versions(m, j),
            ]
            if postgres
            else [m.table, *[c.label(f"{JOB_PREFIX}{c.name}") for c in j.table.c]]
        )
        out: list[Found] = []
        step = chunk_for(m.dialect)
        for start in range(0, len(job_keys), step):
            named = m.isin("job_id", job_keys[start : start + step])
            rows = await conn.execute(
                sa.select(*columns)
                .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
                .where(
                    named
                    if keys is None
                    else sa.or_(named, m.isin("id", keys[start : start + step]))
                )
            )
            # row by row, each status text kept once and each error only as its signature:
            # 100,000 rows are not held twice, as rows and as what they became
            if postgres:
                texts: dict[str, str] = {}
                out.extend(
                    Found(
                        r[0],
                        r[1],
                        once(texts, str(r[2])),
                        once(texts, str(r[4])),
                        signature_of(r[3]),
                        NOT_KEPT,
                        once(texts, r[5]),  # rows written together share a version
                    )
                    for r in rows
                )
            else:
                out.extend(Found.of(tuple(r), layout) for r in rows)
        return out

    def in_database(self, dialect: str) -> bool:
        return dialect == "postgresql"

    async def keep(
        self, conn: AsyncConnection, *, request: int, targets: list[Target], first: int = 0
    ) -> Digest:
        t = await self.profile.tables(conn)
        return await kept.keep(
            conn, m=t["messages"], j=t["jobs"], request=request, targets=targets, first=first
        )

    async def apply_kept(
        self, conn: AsyncConnection, *, request: int, action: Action, now: datetime, note: str
    ) -> Kept:
        t = await self.profile.tables(conn)  # reflected first: the check reads its types
        self.profile.check_writable(action)
        return await kept.apply_kept(
            conn,
            m=t["messages"],
            j=t["jobs"],
            e=t.get("events"),
            request=request,
            action=action,
            now=now,
            note=note,
        )

    async def apply(
        self,
        conn: AsyncConnection,
        *,
        action: Action,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        t = await self.profile.tables(conn)  # reflected first: the check reads its types
        self.profile.check_writable(action)
        m, j, e = t["messages"], t["jobs"], t.get("events")
        changed_jobs: list[Any] = []
        before: list[tuple[str, Any]] = []  # (message, image): dicts, or database JSON
        # Grouped by the job's frozen status only, and a job's messages kept in one chunk:
        # whichever statement changed the job first would leave its other messages
        # behind, their job no longer in its frozen state.
        by_job_state: dict[str, list[Target]] = defaultdict(list)
        for x in targets:
            by_job_state[frozen_state(x)[1]].append(x)
        for job_status, group in by_job_state.items():
            for part in chunks_of_whole(group, chunk_for(m.dialect), key=lambda x: x.id):
                jobs = await self._apply_part(
                    conn,
                    m=m,
                    j=j,
                    action=action,
                    part=part,
                    job_status=job_status,
                    now=now,
                    before=before,
                )
                if e is not None and jobs:
                    event_type = REDRIVE_EVENT if action is Action.REDRIVE else CANCEL_EVENT
                    await insert_events(
                        conn, e, jobs=jobs, event_type=event_type, note=note, now=now
                    )
                changed_jobs.extend(jobs)
        changed = [str(plain(x)) for x in changed_jobs]
        done = set(changed)
        skipped = [
            Ineligible(x.id, f"moved on since the request (no longer {x.state})")
            for x in targets
            if x.id not in done
        ]
        events = len(changed) if e is not None else 0
        return Applied(changed=changed, skipped=skipped, before=before, job_events=events)

    async def _apply_part(
        self,
        conn: AsyncConnection,
        *,
        m: BoundTable,
        j: BoundTable,
        action: Action,
        part: Sequence[Target],
        job_status: str,
        now: datetime,
        before: list[tuple[str, Any]],
    ) -> list[Any]:
        """Change one chunk of targets whose jobs were frozen in the same status; the
        jobs changed. A message changes only if it is still in the status it was frozen
        in, and its job only if it is too."""
        frozen = {str(x.part): frozen_state(x)[0] for x in part}
        statuses = sorted(set(frozen.values()))
        msg_ids = self.profile.id_texts(m.c("id"), frozen)
        postgres = m.dialect == "postgresql"
        image: list[Any] = (
            [row_json(m, j)]
            if postgres
            else [m.table, *[c.label(f"{JOB_PREFIX}{c.name}") for c in j.table.c]]
        )
        still = (
            await conn.execute(
                sa.select(
                    as_text(m.c("id"), postgres).label("qb_mid"),
                    as_text(m.c("job_id"), postgres).label("qb_jid"),
                    m.c("status").label("qb_mstatus"),
                    *image,
                )
                .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
                .where(
                    m.isin("id", msg_ids),
                    m.c("status").in_(statuses),
                    j.c("status") == job_status,
                )
                .with_for_update(of=m.table)
            )
        ).all()
        still = [r for r in still if str(plain(r[2])) == frozen.get(str(r[0]))]
        if not still:
            return []
        if postgres:
            before.extend((str(r[0]), raw_json(r[3])) for r in still)
        else:  # the same {"message": ..., "job": ...} image the database builds
            layout = Layout.of(m, j)
            before.extend((str(r[0]), Found.of(tuple(r)[3:], layout).snapshot) for r in still)
        ok_msgs = [r[0] for r in still]
        ok_jobs = list({r[1]: None for r in still})
        if action is Action.REDRIVE:  # back to pending / queued, the whole chunk at once
            message: dict[str, Any] = {
                m.c("status").name: PENDING,
                m.c("available_at").name: now,
                m.c("claimed_at").name: None,
                m.c("last_error").name: None,
            }
            if m.has("attempt_count"):
                message[m.c("attempt_count").name] = 0
            job: dict[str, Any] = {j.c("status").name: QUEUED}
            for column, value in RESET_JOB:
                if j.has(column):
                    job[j.c(column).name] = value
            await conn.execute(
                m.table.update()
                .where(m.isin("id", ok_msgs), m.c("status").in_(statuses))
                .values(message)
            )
            await conn.execute(
                j.table.update()
                .where(j.isin("id", ok_jobs), j.c("status") == job_status)
                .values(job)
            )
        else:  # cancel a dead-lettered job on purpose: it is never redriven
            await conn.execute(
                j.table.update()
                .where(j.isin("id", ok_jobs), j.c("status") == job_status)
                .values({j.c("status").name: CANCELLED})
            )
        return ok_jobs
