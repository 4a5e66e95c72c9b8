"""Guarded changes on a message_job estate: seed 003's redrive, made set-based."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import (
    CHUNK,
    Applied,
    ChangeKind,
    Frozen,
    Ineligible,
    Selector,
    Target,
    chunks,
)
from services.errors import UsageError
from services.estate.message_job import MessageJobProfile
from services.estate.profile import BoundTable, plain
from services.estate.signature import display_signature, error_signature

REDRIVE_EVENT = "REDRIVE_REQUESTED"
CANCEL_EVENT = "CANCELLED"


_JOB = "job__"


@dataclass(frozen=True)
class _Found:
    """One message row and its job's row, as found when freezing."""

    message_id: str
    job_id: str
    status: str
    job_status: str
    last_error: str | None
    message: dict[str, Any]
    job: dict[str, Any]

    @classmethod
    def of(cls, row: Any, names: tuple[str, str, str, str, str]) -> _Found:
        msg_id, job_id, status, last_error, job_status = names
        message = {k: v for k, v in row.items() if not k.startswith(_JOB)}
        job = {k[len(_JOB) :]: v for k, v in row.items() if k.startswith(_JOB)}
        return cls(
            str(row[msg_id]),
            str(row[job_id]),
            str(row[status]),
            str(row[job_status]),
            row[last_error],
            message,
            job,
        )

    def target(self) -> Target:
        return Target(
            id=self.job_id,
            key={"job_id": self.job_id, "message_id": self.message_id},
            state="DLQ/FAILED",
            signature=display_signature(error_signature(self.last_error)),
            row={"message": self.message, "job": self.job},
        )


class MessageJobChanges:
    def __init__(self, profile: MessageJobProfile) -> None:
        self.profile = profile

    async def freeze(
        self, conn: AsyncConnection, *, kind: ChangeKind, selector: Selector
    ) -> Frozen:
        if kind is ChangeKind.REQUEUE:
            raise UsageError(
                f"requeue resets worker_queue rows (seed 002 §10, §12); queue "
                f"{self.profile.queue!r} is message_job: use /queue redrive ID --reason ..."
            )
        if selector.duplicates or selector.failure_reason is not None:
            raise UsageError(
                f"--duplicates and --failure-reason apply to worker_queue queues; queue "
                f"{self.profile.queue!r} is message_job: name the job ids"
            )
        t = await self.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        job_keys = [self.profile.coerce_id(j.c("id"), raw) for raw in selector.ids]
        msg_keys = [self.profile.coerce_id(m.c("id"), raw) for raw in selector.ids]
        found = await self._lookup(conn, m, j, job_keys, msg_keys)
        by_job: dict[str, list[_Found]] = {}
        by_msg: dict[str, _Found] = {}
        for f in found:
            by_job.setdefault(f.job_id, []).append(f)
            by_msg[f.message_id] = f
        targets: list[Target] = []
        ineligible: list[Ineligible] = []
        seen: set[str] = set()
        for raw, job_key, msg_key in zip(selector.ids, job_keys, msg_keys, strict=True):
            # an id names a job, or else one of its messages
            as_msg = str(plain(msg_key))
            candidates = by_job.get(str(plain(job_key))) or (
                [by_msg[as_msg]] if as_msg in by_msg else []
            )
            if not candidates:
                ineligible.append(Ineligible(raw, "not found (no job or message with that id)"))
                continue
            job_id = candidates[0].job_id
            if job_id in seen:
                continue
            seen.add(job_id)
            job_status = candidates[0].job_status
            dead = [c for c in candidates if c.status == "DLQ"]
            if job_status == "CANCELLED":
                ineligible.append(Ineligible(job_id, "CANCELLED: cancelled on purpose"))
            elif not dead:
                states = "/".join(sorted({c.status for c in candidates}))
                ineligible.append(Ineligible(job_id, f"{job_status}/{states}: not dead-lettered"))
            elif job_status != "FAILED":
                ineligible.append(Ineligible(job_id, f"{job_status}: job is not FAILED"))
            else:
                targets.extend(d.target() for d in dead)
        return Frozen(targets, ineligible)

    async def _lookup(
        self,
        conn: AsyncConnection,
        m: BoundTable,
        j: BoundTable,
        job_keys: list[Any],
        keys: list[Any],
    ) -> list[_Found]:
        """Every message whose id, or whose job's id, is named, with its job's row."""
        job_cols = [c.label(f"{_JOB}{c.name}") for c in j.table.c]
        names = (
            m.c("id").name,
            m.c("job_id").name,
            m.c("status").name,
            m.c("last_error").name,
            f"{_JOB}{j.c('status').name}",
        )
        out: list[_Found] = []
        step = 50_000 if m.dialect == "postgresql" else CHUNK
        for start in range(0, len(keys), step):
            rows = await conn.execute(
                sa.select(m.table, *job_cols)
                .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
                .where(
                    sa.or_(
                        m.isin("job_id", job_keys[start : start + step]),
                        m.isin("id", keys[start : start + step]),
                    )
                )
            )
            out.extend(_Found.of(r._mapping, names) for r in rows.all())
        return out

    async def apply(
        self,
        conn: AsyncConnection,
        *,
        kind: ChangeKind,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        t = await self.profile.tables(conn)
        m, j, e = t["messages"], t["jobs"], t["events"]
        changed_jobs: list[Any] = []
        before: list[dict[str, Any]] = []
        for part in chunks(targets):
            msg_ids = [self.profile.coerce_id(m.c("id"), str(x.key["message_id"])) for x in part]
            still = (
                await conn.execute(
                    sa.select(m.table, *[c.label(f"job__{c.name}") for c in j.table.c])
                    .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
                    .where(m.isin("id", msg_ids), m.c("status") == "DLQ", j.c("status") == "FAILED")
                    .with_for_update()
                )
            ).all()
            if not still:
                continue
            before.extend(dict(r._mapping) for r in still)
            ok_msgs = [r._mapping[m.c("id").name] for r in still]
            ok_jobs = list({r._mapping[m.c("job_id").name] for r in still})
            if kind is ChangeKind.REDRIVE:  # seed 003 step 4, for the whole chunk at once
                await conn.execute(
                    m.table.update()
                    .where(m.isin("id", ok_msgs), m.c("status") == "DLQ")
                    .values(
                        {
                            m.c("status").name: "PENDING",
                            m.c("attempt_count").name: 0,
                            m.c("available_at").name: now,
                            m.c("claimed_at").name: None,
                            m.c("last_error").name: None,
                        }
                    )
                )
                await conn.execute(
                    j.table.update()
                    .where(j.isin("id", ok_jobs), j.c("status") == "FAILED")
                    .values(
                        {
                            j.c("status").name: "QUEUED",
                            j.c("attempt_count").name: 0,
                            j.c("progress_percent").name: 0,
                            j.c("finished_at").name: None,
                            j.c("error_message").name: None,
                        }
                    )
                )
            else:  # cancel a dead-lettered job on purpose: it is never redriven
                await conn.execute(
                    j.table.update()
                    .where(j.isin("id", ok_jobs), j.c("status") == "FAILED")
                    .values({j.c("status").name: "CANCELLED"})
                )
            event_type = REDRIVE_EVENT if kind is ChangeKind.REDRIVE else CANCEL_EVENT
            await conn.execute(
                e.table.insert(),
                [
                    {
                        **self._event_id(e),
                        e.c("aggregate_id").name: job,
                        e.c("event_type").name: event_type,
                        e.c("message").name: note,
                        e.c("created_at").name: now,
                    }
                    for job in ok_jobs
                ],
            )
            changed_jobs.extend(ok_jobs)
        changed = [str(plain(x)) for x in changed_jobs]
        done = set(changed)
        skipped = [
            Ineligible(x.id, "moved on since the request (no longer DLQ/FAILED)")
            for x in targets
            if x.id not in done
        ]
        return Applied(changed=changed, skipped=skipped, before=before, job_events=len(changed))

    def _event_id(self, e: BoundTable) -> dict[str, Any]:
        """job_events.id may have no default (seed 003 supplies it): give the column's type."""
        col = e.c("id")
        if col.server_default is not None or (
            isinstance(col.type, sa.Integer) and col.autoincrement is True
        ):
            return {}
        if isinstance(col.type, sa.Integer):
            raise UsageError(
                f"{e.name}.id is an integer column without a default; queuebot "
                "cannot choose event ids safely there: give it an identity default"
            )
        new = uuid.uuid4()
        return {col.name: new if isinstance(col.type, sa.Uuid) else str(new)}
