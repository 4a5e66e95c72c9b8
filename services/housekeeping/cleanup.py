"""One run's parts on one queue whose profile lets housekeeping change its rows
(``HousekeepingParts``), inside the run's transaction: each part's guarded statements
with an audit event, and the notices they call for.

Part B tells a human of each retry-exhausted row before it retires it, and retires only
those told: by chat (the ``RetryExhausted`` alert, where a chat platform is configured)
or by the webhook (a 2xx answer, asked before the run's transaction: ``told``). The
alert and the retiring UPDATE commit together. A row nobody could be told of stays
failed, and the summary says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.config.housekeeping import PARTS, HousekeepingConfig
from services.estate.housekeeping import Change, HousekeepingParts
from services.estate.profile import plain
from services.estate.tables import BoundTable
from services.housekeeping import notices
from services.housekeeping.notices import Notice
from services.housekeeping.report import PartReport, QueueReport, RowChange, Step
from services.housekeeping.webhook import idempotency_key

KEY = "idempotency_key"  # a retry-exhausted row's notice, the same in every run
LATE = (
    "not retry-exhausted yet when this run told the webhook, before its transaction; "
    "the next run tells it"
)
# What the webhook said of each notice, by its idempotency key: None when it took it.
Answers = Mapping[str, str | None]


@dataclass
class Cleanup:
    """The parts of one run on one queue's table ``q``."""

    conn: AsyncConnection
    queue: str
    profile: str  # the profile's name, as the report shows it
    parts: HousekeepingParts
    q: BoundTable
    audit: AuditTrail
    config: HousekeepingConfig
    actor: Actor
    now: datetime
    dry_run: bool
    chat: bool  # a chat platform is configured: alerts reach people
    webhook: bool  # a webhook is configured: it was told before the transaction

    async def run(self, *, only: Sequence[str], told: Answers | None) -> tuple[QueueReport, int]:
        """Each part of ``only`` in the runbook's order; the notices raised, counted."""
        out = QueueReport(self.queue, self.profile)
        raised: list[Notice] = []
        for part in PARTS:
            if part not in only:
                continue
            result = PartReport(part, self.parts.titles[part])
            out.parts.append(result)
            skip = self.parts.skipped(self.q, part)
            if skip is not None:
                result.skipped = skip.why
                continue
            for change in self.parts.changes(self.q, part, self.config, self.now):
                result.steps += await self.apply(change, dry_run=self.dry_run)
            if part == "B":
                raised += self._last_retries(result)
                raised += await self._retire(result, told=told or {})
            elif part == "D" and result.changed and not self.dry_run:
                ids = [r.id for s in result.steps for r in s.rows]
                raised.append(
                    Notice(
                        notices.RELEASED,
                        key=self.now.isoformat(),
                        summary=f"{len(ids)} stuck claimed row(s) of {self.queue} released",
                        description=(
                            f"{self.parts.release_note(self.config)}; back to "
                            f"{self.parts.queued}: {', '.join(ids[:50])}"
                        ),
                    )
                )
            elif part == "F":
                await self._reroute(result)
        if raised and not self.dry_run:
            await notices.raise_notices(self.conn, queue=self.queue, notices=raised, now=self.now)
        return out, len(raised)

    async def apply(self, change: Change, *, dry_run: bool) -> list[Step]:
        """The change's guarded statement (a SELECT in a dry run), and its audit event;
        its rows as one step, or split by what each got (``Change.what_of``)."""
        q = self.q
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
        found = (await self.conn.execute(statement)).all()
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
                self.conn,
                action="housekeeping.changed",
                actor=self.actor,
                at=self.now,
                subject=f"housekeeping:{change.part}",
                queue=self.queue,
                reason=f"Part {change.part}: {self.parts.titles[change.part]}",
                details={
                    "part": change.part,
                    "what": change.what,
                    "count": len(rows),
                    "ids": [r.id for r in rows],
                    "facts": {r.id: dict(r.facts) for r in rows if r.facts},
                },
            )
        return steps

    def _last_retries(self, result: PartReport) -> list[Notice]:
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
                        summary=f"LAST retry of job {row.id} in {self.queue}"
                        + (f" (issue {issue})" if issue is not None else ""),
                        description=(
                            f"retry {retry} of {most}, {step.what}; if it fails again a human "
                            f"is told and the row is retired to {self.parts.retired}"
                        ),
                        labels={"job": row.id},
                    )
                )
        return found

    async def _retire(self, result: PartReport, *, told: Answers) -> list[Notice]:
        """Tell a human of each retry-exhausted row (by chat, in this transaction; the
        webhook was told before it: ``told``), then retire exactly those told."""
        found = await exhausted(self.conn, self.queue, self.parts, self.q)
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
        if self.dry_run:
            result.steps.append(
                Step(
                    "B",
                    f"retired to {self.parts.retired}",
                    [RowChange(r["id"]) for r in rows],
                )
            )
            result.notes.append(f"each is told to a human first ({' and '.join(ways)})")
            return []

        def by_webhook(row: Mapping[str, Any]) -> bool:
            return self.webhook and row[KEY] in told and told[row[KEY]] is None

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
            self.conn,
            action="housekeeping.notified",
            actor=self.actor,
            at=self.now,
            subject="housekeeping:B",
            queue=self.queue,
            reason="retry-exhausted rows told to a human before they are retired",
            details={
                "ids": [r["id"] for r in taken],
                "chat": self.chat,
                "webhook": [r["id"] for r in taken if by_webhook(r)],
            },
        )
        retire = self.parts.retire(self.q, [database_id[r["id"]] for r in taken])
        for change in retire:
            result.steps += await self.apply(change, dry_run=False)
        retired = {
            row.id for step in result.steps for row in step.rows if step.what == retire[0].what
        }
        if not self.chat:
            return []
        return [
            Notice(
                notices.EXHAUSTED,
                key=r["id"],
                summary=f"Job {r['id']} of {self.queue} failed after every retry"
                + (f" (issue {r.get('issue')})" if r.get("issue") is not None else ""),
                description=(
                    f"{r.get('reason')} after {r.get('retry')} of {r.get('max_retries')} "
                    f"retries: {str(r.get('error') or '')[:500]}. Retired to "
                    f"{self.parts.retired}; /queue requeue gives it another chance."
                ),
                labels={"job": r["id"]},
            )
            for r in taken
            if r["id"] in retired
        ]

    async def _reroute(self, result: PartReport) -> None:
        """Nodes with too many recent failures: re-route their rows, and keep one alert
        per node firing until it stops tripping for a window."""
        node = self.parts.node(self.q)
        threshold, window = self.parts.trip_rule(self.config)
        tripped = {
            str(r[0]): int(r[1])
            for r in (
                await self.conn.execute(
                    sa.select(node, sa.func.count())
                    .where(*self.parts.tripped_where(self.q, self.config, self.now))
                    .group_by(node)
                    .having(sa.func.count() >= threshold)
                    .order_by(node)
                )
            ).all()
        }
        affected: dict[str, list[str]] = {}
        for change in self.parts.reroute(self.q, self.config, self.now, list(tripped)):
            result.steps += await self.apply(change, dry_run=self.dry_run)
        for name, step in zip(tripped, result.steps, strict=False):
            affected[name] = [r.id for r in step.rows]
        if tripped:
            result.notes.append(
                "unavailable: "
                + ", ".join(f"{n} ({self.parts.tripped_by} x{c})" for n, c in tripped.items())
            )
        if self.dry_run:
            return
        said = await notices.report_nodes(
            self.conn,
            queue=self.queue,
            tripped=tripped,
            tripped_by=self.parts.tripped_by,
            window=window,
            now=self.now,
            affected=affected,
        )
        if said.opened:
            result.notes.append(f"reported unavailable: {', '.join(said.opened)}")
        if said.resolved:
            result.notes.append(
                f"available again (no {self.parts.tripped_by} trip for a window): "
                f"{', '.join(said.resolved)}"
            )


async def exhausted(
    conn: AsyncConnection, queue: str, parts: HousekeepingParts, q: BoundTable
) -> list[tuple[Any, dict[str, Any]]]:
    """The retry-exhausted rows: each its id as the database gives it, and as a notice
    tells of it: its id, its facts and the notice's idempotency key."""
    facts = parts.exhausted_facts(q)
    found = (
        await conn.execute(
            sa.select(
                q.c("id"),
                parts.retry_at(q),
                *(e.label(f"f_{n}") for n, e in facts.items()),
            )
            .where(*parts.exhausted_where(q))
            .order_by(q.c("id"))
        )
    ).all()
    rows: list[tuple[Any, dict[str, Any]]] = []
    for r in found:
        row: dict[str, Any] = {"id": str(plain(r[0]))}
        row.update({n: plain(r[i + 2]) for i, n in enumerate(facts)})
        row[KEY] = idempotency_key(
            queue=queue,
            job=row["id"],
            retry=row.get("retry"),
            max_retries=row.get("max_retries"),
            next_attempt_at=r[1],
        )
        rows.append((r[0], row))
    return rows


def _order(ident: str) -> tuple[int, str]:
    return (0, f"{int(ident):020d}") if ident.lstrip("-").isdigit() else (1, ident)
