"""One housekeeping run over every configured queue, in one transaction.

The run takes an advisory lock first (PostgreSQL: ``pg_try_advisory_xact_lock``; a run
that does not get it reports that it skipped and does nothing; on SQLite, the single
writer serialises runs, and a run that waited finds its work done). Then, per
worker_queue, Parts A-F in the runbook's order, each a guarded set-based statement with
an audit event in the same transaction, and the notices as alerts; per message_job
queue, a report with no writes. A dry run takes the same lock, SELECTs what each
statement's guard holds and writes nothing.

Part B tells a human of each retry-exhausted row before it retires it, and retires only
those told: by chat (the ``RetryExhausted`` alert, where a chat platform is configured)
or by the webhook (a 2xx answer). The alert and the retiring UPDATE commit together. The
webhook is called before the run's transaction, never inside it: no call leaves the
process while the run holds the audit chain (or any lock), so a webhook that never
answers delays only this run. A row nobody could be told of stays failed, and the
summary says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import samples
from services.audit import Actor, AuditTrail
from services.config.housekeeping import PARTS, HousekeepingConfig
from services.db import reading, transaction
from services.errors import UsageError
from services.estate.estate import Estate
from services.estate.profile import BoundTable, QueueProfile, plain
from services.housekeeping import notices, parts
from services.housekeeping.notices import Notice
from services.housekeeping.report import PartReport, QueueReport, RowChange, RunReport, Step
from services.housekeeping.webhook import Webhook, idempotency_key
from services.scheduler import FollowUp

LOCK = 0x71B0_0015  # the advisory lock key of housekeeping runs
WORKER_QUEUE = "worker_queue"
MESSAGE_JOB = "message_job"
KEY = "idempotency_key"  # a retry-exhausted row's notice, the same in every run
LATE = (
    "not retry-exhausted yet when this run told the webhook, before its transaction; "
    "the next run tells it"
)
# What the webhook said of each notice, by its idempotency key: None when it took it.
Answers = Mapping[str, str | None]


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
        async with transaction(self.engine, subject="housekeeping") as conn:
            report, follow_ups = await self.run_in(
                conn, actor=actor, now=self.clock(), dry_run=dry_run, only=only, told=answers
            )
        for follow_up in follow_ups:
            await follow_up()
        return report

    async def tell_webhook(self, *, only: Sequence[str] = PARTS) -> Answers:
        """POST each retry-exhausted row of every worker queue to the webhook (none when
        it is not set or Part B is not run). The rows are read on a connection that is
        given back before the first POST, so nothing is held while the webhook answers;
        each POST is bounded by the webhook's timeout."""
        if self.webhook is None or "B" not in only:
            return {}
        offered: list[dict[str, Any]] = []
        async with reading(self.engine) as conn:
            for profile in self.estate.profiles.values():
                if profile.name != WORKER_QUEUE:
                    continue
                q = (await profile.tables(conn))["queue"]
                if parts.skipped(profile, q, "B") is None:
                    found = await _exhausted(conn, profile, q)
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
    ) -> tuple[RunReport, list[FollowUp]]:
        """The run's changes inside ``conn``'s transaction. It calls nothing outside the
        process: ``told`` is what the webhook said (``tell_webhook``, before the
        transaction); a row it was not told of is not retired by the webhook's say."""
        report = RunReport(at=now, dry_run=dry_run)
        if not await self._lock(conn):
            report.locked_out = True
            return report, []
        raised = 0
        for name, profile in self.estate.profiles.items():
            if profile.name == WORKER_QUEUE:
                queue_report, count = await self._worker_queue(
                    conn, profile, now=now, dry_run=dry_run, only=only, actor=actor, told=told
                )
                raised += count
            elif profile.name == MESSAGE_JOB:
                queue_report = await self._message_job(conn, profile, now=now)
            else:
                queue_report = QueueReport(
                    name, profile.name, notes=[f"no housekeeping for the {profile.name} profile"]
                )
            report.queues.append(queue_report)
        if dry_run:
            return report, []
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
        follow_ups: list[FollowUp] = []
        if raised and self.wake_alerts is not None:
            wake = self.wake_alerts

            async def kick() -> None:
                wake()

            follow_ups.append(kick)
        return report, follow_ups

    async def _lock(self, conn: AsyncConnection) -> bool:
        if conn.dialect.name == "postgresql":
            got = (
                await conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK})
            ).scalar()
            return bool(got)
        return True  # SQLite: one writer at a time; the guards make a later run a no-op

    # -- worker_queue ------------------------------------------------------------------

    async def _worker_queue(
        self,
        conn: AsyncConnection,
        profile: QueueProfile,
        *,
        now: datetime,
        dry_run: bool,
        only: Sequence[str],
        actor: Actor,
        told: Answers | None,
    ) -> tuple[QueueReport, int]:
        q = (await profile.tables(conn))["queue"]
        out = QueueReport(profile.queue, profile.name)
        raised: list[Notice] = []
        for part in PARTS:
            if part not in only:
                continue
            result = PartReport(part)
            out.parts.append(result)
            skip = parts.skipped(profile, q, part)
            if skip is not None:
                result.skipped = skip.why
                continue
            changes: list[parts.Change] = []
            if part == "A":
                changes = parts.part_a(profile, q)
            elif part == "B":
                changes = parts.part_b_retries(profile, q, self.config, now)
            elif part == "C":
                changes = parts.part_c(profile, q, self.config, now)
            elif part == "D":
                changes = parts.part_d(q, self.config, now)
            elif part == "E":
                changes = parts.part_e(profile, q, self.config, now)
            for change in changes:
                result.steps += await self._apply(
                    conn, q=q, change=change, dry_run=dry_run, actor=actor, now=now
                )
            if part == "B":
                raised += self._last_retries(profile, result)
                raised += await self._retire(
                    conn,
                    profile=profile,
                    q=q,
                    result=result,
                    dry_run=dry_run,
                    actor=actor,
                    now=now,
                    told=told or {},
                )
            elif part == "D" and result.changed and not dry_run:
                ids = [r.id for s in result.steps for r in s.rows]
                raised.append(
                    Notice(
                        notices.RELEASED,
                        key=now.isoformat(),
                        summary=f"{len(ids)} stuck claimed row(s) of {profile.queue} released",
                        description=(
                            f"claimed over {self.config.stuck_claim_minutes} min ago, never "
                            f"started and no heartbeat; back to queued: {', '.join(ids[:50])}"
                        ),
                    )
                )
            elif part == "F":
                await self._oom(
                    conn, profile=profile, q=q, result=result, dry_run=dry_run, actor=actor, now=now
                )
        if raised and not dry_run:
            await notices.raise_notices(conn, queue=profile.queue, notices=raised, now=now)
        return out, len(raised)

    async def _apply(
        self,
        conn: AsyncConnection,
        *,
        q: BoundTable,
        change: parts.Change,
        dry_run: bool,
        actor: Actor,
        now: datetime,
    ) -> list[Step]:
        """The change's guarded statement (a SELECT in a dry run), and its audit event;
        its rows as one step, or split by what each got (``Change.what_of``)."""
        ident = q.c("id")
        facts = change.facts if dry_run or not change.after else change.after
        columns = [ident, *(expr.label(f"f_{name}") for name, expr in facts.items())]
        if dry_run:
            statement: Any = sa.select(*columns).where(*change.where)
        elif change.values is None:
            statement = sa.delete(q.table).where(*change.where).returning(*columns)
        else:
            statement = (
                sa.update(q.table)
                .where(*change.where)
                .values(dict(change.values))
                .returning(*columns)
            )
        found = (await conn.execute(statement)).all()
        rows = sorted(
            (
                RowChange(
                    str(plain(r[0])),
                    {name: plain(r[i + 1]) for i, name in enumerate(facts)},
                )
                for r in found
            ),
            key=lambda row: _order(row.id),
        )
        steps = [Step(change.part, change.what, rows)]
        if change.what_of is not None:
            split: dict[str, list[RowChange]] = {}
            for row in rows:
                split.setdefault(change.what_of(row.facts), []).append(row)
            # in the order of the retry each got (the split is by backoff step)
            order = sorted(
                split.items(), key=lambda kv: min(int(r.facts.get("retry") or 0) for r in kv[1])
            )
            steps = [Step(change.part, what, part) for what, part in order]
        if rows and not dry_run:
            await self.audit.append(
                conn,
                action="housekeeping.changed",
                actor=actor,
                at=now,
                subject=f"housekeeping:{change.part}",
                queue=_queue_of(q, self.estate),
                reason=f"Part {change.part}: {parts.TITLES[change.part]}",
                details={
                    "part": change.part,
                    "what": change.what,
                    "count": len(rows),
                    "ids": [r.id for r in rows],
                    "facts": {r.id: dict(r.facts) for r in rows if r.facts},
                },
            )
        return steps

    def _last_retries(self, profile: QueueProfile, result: PartReport) -> list[Notice]:
        """A red LAST-retry notice for each row requeued for its last retry."""
        found: list[Notice] = []
        for step in result.steps:
            for row in step.rows:
                retry, most = row.facts.get("retry"), row.facts.get("max_retries")
                if retry is None or most is None or int(retry) < int(most):
                    continue
                issue = row.facts.get("issue")
                found.append(
                    Notice(
                        notices.LAST_RETRY,
                        key=f"{row.id}:{retry}",
                        summary=f"LAST retry of job {row.id} in {profile.queue}"
                        + (f" (issue {issue})" if issue is not None else ""),
                        description=(
                            f"retry {retry} of {most}, {step.what}; if it fails again a human "
                            "is told and the row is retired to failed_permanently"
                        ),
                        labels={"job": row.id},
                    )
                )
        return found

    async def _retire(
        self,
        conn: AsyncConnection,
        *,
        profile: QueueProfile,
        q: BoundTable,
        result: PartReport,
        dry_run: bool,
        actor: Actor,
        now: datetime,
        told: Answers,
    ) -> list[Notice]:
        """Tell a human of each retry-exhausted row (by chat, in this transaction; the
        webhook was told before it: ``told``), then retire exactly those told."""
        found = await _exhausted(conn, profile, q)
        if not found:
            return []
        rows = [row for _, row in found]
        database_id = {row["id"]: ident for ident, row in found}
        ways = [w for w, on in (("chat", self.chat), ("the webhook", self.webhook)) if on]
        if not ways:
            result.notes.append(
                f"{len(rows)} retry-exhausted row(s) stay failed: nobody can be told of them "
                "(no chat platform is configured and QUEUEBOT_HOUSEKEEP_WEBHOOK_URL is not set): "
                + ", ".join(r["id"] for r in rows[:20])
            )
            return []
        if dry_run:
            result.steps.append(
                Step(
                    "B",
                    "retired to failed_permanently",
                    [RowChange(r["id"]) for r in rows],
                )
            )
            result.notes.append(f"each is told to a human first ({' and '.join(ways)})")
            return []

        def by_webhook(row: Mapping[str, Any]) -> bool:
            return self.webhook is not None and row[KEY] in told and told[row[KEY]] is None

        taken = [r for r in rows if self.chat or by_webhook(r)]
        untold = [r for r in rows if r not in taken]
        if untold:
            why = sorted({told.get(r[KEY], LATE) or LATE for r in untold})
            result.notes.append(
                f"{len(untold)} retry-exhausted row(s) stay failed, not told to anyone "
                f"({'; '.join(why)}): {', '.join(r['id'] for r in untold[:20])}"
            )
        if not taken:
            return []
        await self.audit.append(
            conn,
            action="housekeeping.notified",
            actor=actor,
            at=now,
            subject="housekeeping:B",
            queue=profile.queue,
            reason="retry-exhausted rows told to a human before they are retired",
            details={
                "ids": [r["id"] for r in taken],
                "chat": self.chat,
                "webhook": [r["id"] for r in taken if by_webhook(r)],
            },
        )
        retire = parts.part_b_retire(profile, q, [database_id[r["id"]] for r in taken])
        for change in retire:
            result.steps += await self._apply(
                conn, q=q, change=change, dry_run=False, actor=actor, now=now
            )
        retired = {
            row.id for step in result.steps for row in step.rows if step.what == retire[0].what
        }
        if not self.chat:
            return []
        return [
            Notice(
                notices.EXHAUSTED,
                key=r["id"],
                summary=f"Job {r['id']} of {profile.queue} failed after every retry"
                + (f" (issue {r.get('issue')})" if r.get("issue") is not None else ""),
                description=(
                    f"{r.get('reason')} after {r.get('retry')} of {r.get('max_retries')} "
                    f"retries: {str(r.get('error') or '')[:500]}. Retired to "
                    "failed_permanently; /queue requeue gives it another chance."
                ),
                labels={"job": r["id"]},
            )
            for r in taken
            if r["id"] in retired
        ]

    async def _oom(
        self,
        conn: AsyncConnection,
        *,
        profile: QueueProfile,
        q: BoundTable,
        result: PartReport,
        dry_run: bool,
        actor: Actor,
        now: datetime,
    ) -> None:
        """Nodes with too many recent spawn_oom failures: re-route their rows, and keep
        one alert per node firing until it stops tripping for a window."""
        node = q.c("server_node")
        tripped = {
            str(r[0]): int(r[1])
            for r in (
                await conn.execute(
                    sa.select(node, sa.func.count())
                    .where(*parts.oom_where(profile, q, self.config, now))
                    .group_by(node)
                    .having(sa.func.count() >= self.config.oom_threshold)
                    .order_by(node)
                )
            ).all()
        }
        affected: dict[str, list[str]] = {}
        for change in parts.part_f(profile, q, self.config, now, list(tripped)):
            result.steps += await self._apply(
                conn, q=q, change=change, dry_run=dry_run, actor=actor, now=now
            )
        for name, step in zip(tripped, result.steps, strict=False):
            affected[name] = [r.id for r in step.rows]
        if tripped:
            result.notes.append(
                "unavailable: " + ", ".join(f"{n} (spawn_oom x{c})" for n, c in tripped.items())
            )
        if dry_run:
            return
        said = await notices.report_nodes(
            conn,
            queue=profile.queue,
            tripped=tripped,
            window=timedelta(minutes=self.config.oom_window_minutes),
            now=now,
            affected=affected,
        )
        if said.opened:
            result.notes.append(f"reported unavailable: {', '.join(said.opened)}")
        if said.resolved:
            result.notes.append(
                f"available again (no spawn_oom trip for a window): {', '.join(said.resolved)}"
            )

    # -- message_job: a report, no writes ----------------------------------------------

    async def _message_job(
        self, conn: AsyncConnection, profile: QueueProfile, *, now: datetime
    ) -> QueueReport:
        out = QueueReport(profile.queue, profile.name)
        stuck = await profile.stuck(conn, now=now, limit=20)
        minutes = profile.config.stuck_after_minutes
        if stuck.total:
            ids = ", ".join(r.id for r in stuck.rows)
            out.notes.append(
                f"{stuck.total} PROCESSING message(s) held longer than the visibility timeout "
                f"({minutes} min, the queue's stuck_after_minutes); the workers reclaim "
                f"them: {ids}"
            )
        else:
            out.notes.append(f"no PROCESSING message held longer than {minutes} min")
        window = timedelta(minutes=self.config.dead_letter_window_minutes)
        growth = await samples.dead_growth(conn, profile=profile, now=now, window=window)
        state = {"growing": "growing", "ok": "not growing", "unknown": "not known yet"}
        out.notes.append(f"dead letters {state[growth.verdict]}: {growth.describe()}")
        out.notes.append("message queues are reported on, never changed")
        return out


async def _exhausted(
    conn: AsyncConnection, profile: QueueProfile, q: BoundTable
) -> list[tuple[Any, dict[str, Any]]]:
    """The retry-exhausted rows: each its id as the database gives it, and as a notice
    tells of it: its id, its facts and the notice's idempotency key."""
    facts = parts.exhausted_facts(q)
    found = (
        await conn.execute(
            sa.select(
                q.c("id"),
                q.c("next_attempt_at"),
                *(e.label(f"f_{n}") for n, e in facts.items()),
            )
            .where(*parts.part_b_exhausted(profile, q))
            .order_by(q.c("id"))
        )
    ).all()
    rows: list[tuple[Any, dict[str, Any]]] = []
    for r in found:
        row: dict[str, Any] = {"id": str(plain(r[0]))}
        row.update({n: plain(r[i + 2]) for i, n in enumerate(facts)})
        row[KEY] = idempotency_key(
            queue=profile.queue,
            job=row["id"],
            retry=row.get("retry"),
            max_retries=row.get("max_retries"),
            next_attempt_at=r[1],
        )
        rows.append((r[0], row))
    return rows


def _order(ident: str) -> tuple[int, str]:
    return (0, f"{int(ident):020d}") if ident.lstrip("-").isdigit() else (1, ident)


def _queue_of(q: BoundTable, estate: Estate) -> str | None:
    for name, profile in estate.profiles.items():
        tables = profile.reflected
        if tables is not None and tables.get("queue") is q:
            return name
    return None


def housekeeping_lines(profile: QueueProfile, tables: Mapping[str, BoundTable]) -> list[str]:
    """What ``queuebot config check`` says of housekeeping on this queue: each part its
    table turns off, and why."""
    if profile.name == MESSAGE_JOB:
        return [
            "housekeeping: reports PROCESSING messages past the visibility timeout and "
            "dead-letter growth; never changes a message queue"
        ]
    if profile.name != WORKER_QUEUE or "queue" not in tables:
        return [f"housekeeping: nothing for the {profile.name} profile"]
    off = [s for s in (parts.skipped(profile, tables["queue"], p) for p in PARTS) if s]
    if not off:
        return ["housekeeping: Parts A-F all run"]
    return [f"housekeeping Part {s.part} ({parts.TITLES[s.part]}) is off: {s.why}" for s in off]
