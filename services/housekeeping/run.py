"""One housekeeping run over every configured queue, in one transaction.

The run takes an advisory lock first (PostgreSQL: ``pg_try_advisory_xact_lock``; a run
that does not get it reports that it skipped and does nothing; on SQLite, the single
writer serialises runs, and a run that waited finds its work done). Then, per queue,
what its profile lets housekeeping do: on a queue with ``housekeeping_parts``, Parts A-F
in the runbook's order, each a guarded set-based statement with an audit event in the
same transaction, and the notices as alerts (``cleanup.py``); on a queue with a
``housekeeping_report``, a report with no writes. A dry run takes the same lock, SELECTs
what each statement's guard holds and writes nothing.

The webhook told of retry-exhausted rows is called before the run's transaction, never
inside it: no call leaves the process while the run holds the audit chain (or any lock),
so a webhook that never answers delays only this run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.audit import Actor, AuditTrail
from services.config.housekeeping import PARTS, HousekeepingConfig
from services.db import reading, transaction
from services.db.on_commit import FollowUp, on_commit
from services.errors import UsageError
from services.estate.estate import Estate
from services.estate.housekeeping import HousekeepingReport
from services.estate.profile import QueueProfile
from services.estate.tables import BoundTable
from services.housekeeping import notices
from services.housekeeping.cleanup import Answers, Cleanup, exhausted
from services.housekeeping.notices import Notice
from services.housekeeping.report import QueueReport, RunReport
from services.housekeeping.webhook import Webhook
from services.reads import samples

LOCK = 0x71B0_0015  # the advisory lock key of housekeeping runs


def parse_only(text: str | None) -> tuple[str, ...]:
    """``--only A,B`` as parts, or a usage error saying what is allowed."""
    if text is None or not text.strip():
        return PARTS
    chosen = [p.strip().upper() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PARTS]
    if unknown or not chosen:
        raise UsageError(
            f"--only {text!r}: the parts are {', '.join(PARTS)}, comma-separated, e.g. --only A,D"
        )
    return tuple(p for p in PARTS if p in chosen)


class Housekeeper:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        estate: Estate,
        audit: AuditTrail,
        config: HousekeepingConfig,
        clock: Callable[[], datetime],
        chat: bool,
        webhook: Webhook | None = None,
        wake_alerts: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.estate = estate
        self.audit = audit
        self.config = config
        self.clock = clock
        self.chat = chat  # a chat platform is configured: alerts reach people
        self.webhook = webhook
        self.wake_alerts = wake_alerts

    # -- the use case ------------------------------------------------------------------

    async def run(
        self, *, actor: Actor, dry_run: bool = False, only: Sequence[str] = PARTS
    ) -> RunReport:
        """One run: the webhook is told of each retry-exhausted row first, outside any
        transaction; then the run's own transaction changes the rows (retiring only
        those told); the alert pipeline is woken after it."""
        answers = {} if dry_run else await self.tell_webhook(only=only)
        follow_ups: list[FollowUp] = []
        async with transaction(self.engine, subject="housekeeping", follow_ups=follow_ups) as conn:
            report = await self.run_in(
                conn, actor=actor, now=self.clock(), dry_run=dry_run, only=only, told=answers
            )
        for follow_up in follow_ups:
            await follow_up()
        return report

    async def tell_webhook(self, *, only: Sequence[str] = PARTS) -> Answers:
        """POST each retry-exhausted row of every queue with housekeeping parts to the
        webhook (none when it is not set or Part B is not run). The rows are read on a
        connection that is given back before the first POST, so nothing is held while
        the webhook answers; each POST is bounded by the webhook's timeout."""
        if self.webhook is None or "B" not in only:
            return {}
        offered: list[dict[str, Any]] = []
        async with reading(self.engine) as conn:
            for profile in self.estate.profiles.values():
                parts = profile.housekeeping_parts
                if parts is None:
                    continue
                q = (await profile.tables(conn))[parts.role]
                if parts.skipped(q, "B") is None:
                    found = await exhausted(conn, profile.queue, parts, q)
                    offered += [{"queue": profile.queue, **row} for _, row in found]
        if not offered:
            return {}
        return await self.webhook.tell(offered)

    # -- the step, in the caller's transaction -----------------------------------------

    async def run_in(
        self,
        conn: AsyncConnection,
        *,
        actor: Actor,
        now: datetime,
        dry_run: bool = False,
        only: Sequence[str] = PARTS,
        told: Answers | None = None,
    ) -> RunReport:
        """The run's changes inside ``conn``'s transaction. It calls nothing outside the
        process: ``told`` is what the webhook said (``tell_webhook``, before the
        transaction); a row it was not told of is not retired by the webhook's say."""
        report = RunReport(at=now, dry_run=dry_run)
        if not await self._lock(conn):
            report.locked_out = True
            return report
        raised = 0
        for name, profile in self.estate.profiles.items():
            parts, said = profile.housekeeping_parts, profile.housekeeping_report
            if parts is not None:
                cleanup = Cleanup(
                    conn=conn,
                    queue=profile.queue,
                    profile=profile.name,
                    parts=parts,
                    q=(await profile.tables(conn))[parts.role],
                    audit=self.audit,
                    config=self.config,
                    actor=actor,
                    now=now,
                    dry_run=dry_run,
                    chat=self.chat,
                    webhook=self.webhook is not None,
                )
                queue_report, count = await cleanup.run(only=only, told=told)
                raised += count
            elif said is not None:
                queue_report = await self._report(conn, profile, said, now=now)
            else:
                queue_report = QueueReport(
                    name, profile.name, notes=[f"no housekeeping for the {profile.name} profile"]
                )
            report.queues.append(queue_report)
        if dry_run:
            return report
        for queue_report in report.queues:
            if queue_report.changed:
                summary = report.lines()
                await notices.raise_notices(
                    conn,
                    queue=queue_report.queue,
                    notices=[
                        Notice(
                            notices.SUMMARY,
                            key=now.isoformat(),
                            summary=f"Housekeeping changed {queue_report.changed} row(s) of "
                            f"{queue_report.queue}",
                            description="\n".join(summary[1:])[:3000],
                        )
                    ],
                    now=now,
                )
                raised += 1
        if raised and self.wake_alerts is not None:
            wake = self.wake_alerts

            async def kick() -> None:
                wake()

            on_commit(conn, kick)
        return report

    async def _lock(self, conn: AsyncConnection) -> bool:
        if conn.dialect.name == "postgresql":
            got = (
                await conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK})
            ).scalar()
            return bool(got)
        return True  # SQLite: one writer at a time; the guards make a later run a no-op

    # -- a report, no writes ------------------------------------------------------------

    async def _report(
        self,
        conn: AsyncConnection,
        profile: QueueProfile,
        said: HousekeepingReport,
        *,
        now: datetime,
    ) -> QueueReport:
        out = QueueReport(profile.queue, profile.name)
        stuck = await profile.stuck(conn, now=now, limit=20)
        minutes = profile.config.stuck_after_minutes
        if stuck.total:
            ids = ", ".join(r.id for r in stuck.rows)
            out.notes.append(said.stuck_note(stuck.total, ids, minutes))
        else:
            out.notes.append(said.quiet_note(minutes))
        window = timedelta(minutes=self.config.dead_letter_window_minutes)
        growth = await samples.dead_growth(conn, profile=profile, now=now, window=window)
        state = {"growing": "growing", "ok": "not growing", "unknown": "not known yet"}
        out.notes.append(f"dead letters {state[growth.verdict]}: {growth.describe()}")
        out.notes.append(said.closing)
        return out


def housekeeping_lines(profile: QueueProfile, tables: Mapping[str, BoundTable]) -> list[str]:
    """What ``queuebot config check`` says of housekeeping on this queue: each part its
    table turns off, and why."""
    parts, said = profile.housekeeping_parts, profile.housekeeping_report
    if parts is None and said is not None:
        return [said.described]
    if parts is None or parts.role not in tables:
        return [f"housekeeping: nothing for the {profile.name} profile"]
    off = [s for s in (parts.skipped(tables[parts.role], p) for p in PARTS) if s]
    if not off:
        return ["housekeeping: Parts A-F all run"]
    return [f"housekeeping Part {s.part} ({parts.titles[s.part]}) is off: {s.why}" for s in off]
