"""Guarded changes on a message_job estate: seed 003's redrive, made set-based."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import (
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
from services.estate.profile import BoundTable, plain, row_dict
from services.estate.signature import display_signature, error_signature

REDRIVE_EVENT = "REDRIVE_REQUESTED"
CANCEL_EVENT = "CANCELLED"


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
        job_keys = {raw: self.profile.coerce_id(j.c("id"), raw) for raw in selector.ids}
        msg_keys = {raw: self.profile.coerce_id(m.c("id"), raw) for raw in selector.ids}
        joined = m.table.join(j.table, j.c("id") == m.c("job_id"))
        by_job: dict[str, list[sa.Row[Any]]] = {}
        by_msg: dict[str, sa.Row[Any]] = {}
        for part in chunks(list(selector.ids)):
            found = await conn.execute(
                sa.select(m.table, j.c("status").label("qb_job_status"))
                .select_from(joined)
                .where(
                    sa.or_(
                        m.c("job_id").in_([job_keys[r] for r in part]),
                        m.c("id").in_([msg_keys[r] for r in part]),
                    )
                )
            )
            for r in found.all():
                by_job.setdefault(str(plain(r._mapping[m.c("job_id").name])), []).append(r)
                by_msg[str(plain(r._mapping[m.c("id").name]))] = r
        jobs = await self._jobs(
            conn, j, [rows[0]._mapping[m.c("job_id").name] for rows in by_job.values()]
        )
        targets: list[Target] = []
        ineligible: list[Ineligible] = []
        seen: set[str] = set()
        for raw in selector.ids:
            # an id names a job, or else one of its messages
            candidates = by_job.get(str(plain(job_keys[raw])))
            if candidates is None and str(plain(msg_keys[raw])) in by_msg:
                message = by_msg[str(plain(msg_keys[raw]))]
                candidates = [message]
            if not candidates:
                ineligible.append(Ineligible(raw, "not found (no job or message with that id)"))
                continue
            job_id = str(plain(candidates[0]._mapping[m.c("job_id").name]))
            if job_id in seen:
                continue
            seen.add(job_id)
            job_status = str(candidates[0]._mapping["qb_job_status"])
            dead = [c for c in candidates if c._mapping[m.c("status").name] == "DLQ"]
            if job_status == "CANCELLED":
                ineligible.append(Ineligible(job_id, "CANCELLED: cancelled on purpose"))
            elif not dead:
                states = "/".join(sorted({str(c._mapping[m.c("status").name]) for c in candidates}))
                ineligible.append(Ineligible(job_id, f"{job_status}/{states}: not dead-lettered"))
            elif job_status != "FAILED":
                ineligible.append(Ineligible(job_id, f"{job_status}: job is not FAILED"))
            else:
                targets.extend(self._target(m, d, jobs[job_id]) for d in dead)
        return Frozen(targets, ineligible)

    async def _jobs(
        self, conn: AsyncConnection, j: BoundTable, keys: list[Any]
    ) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(keys):
            for r in (await conn.execute(sa.select(j.table).where(j.c("id").in_(part)))).all():
                out[str(plain(r._mapping[j.c("id").name]))] = row_dict(r)
        return out

    def _target(self, m: BoundTable, msg: sa.Row[Any], job: dict[str, Any]) -> Target:
        mm = msg._mapping
        message = {k: v for k, v in row_dict(msg).items() if k != "qb_job_status"}
        job_id, msg_id = plain(mm[m.c("job_id").name]), plain(mm[m.c("id").name])
        return Target(
            id=str(job_id),
            key={"job_id": job_id, "message_id": msg_id},
            state="DLQ/FAILED",
            signature=display_signature(error_signature(mm[m.c("last_error").name])),
            row={"message": message, "job": job},
        )

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
                    .where(
                        m.c("id").in_(msg_ids), m.c("status") == "DLQ", j.c("status") == "FAILED"
                    )
                    .with_for_update()
                )
            ).all()
            if not still:
                continue
            before.extend(row_dict(r) for r in still)
            ok_msgs = [r._mapping[m.c("id").name] for r in still]
            ok_jobs = list({r._mapping[m.c("job_id").name] for r in still})
            if kind is ChangeKind.REDRIVE:  # seed 003 step 4, for the whole chunk at once
                await conn.execute(
                    m.table.update()
                    .where(m.c("id").in_(ok_msgs), m.c("status") == "DLQ")
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
                    .where(j.c("id").in_(ok_jobs), j.c("status") == "FAILED")
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
                    .where(j.c("id").in_(ok_jobs), j.c("status") == "FAILED")
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
