"""Retention: ``queuebot db prune --older-than AGE`` removes queuebot's own operational
residue once it is done and old, in bounded batches, each batch with its audit event in
its transaction (docs/retention.md).

What goes (each table's rule is ``Residue.condition``):

- ``qb_outbox``: posts delivered (or closed) before the cutoff, except the newest audit
  anchor post, which the anchor job reads to post the head only when it moved;
- ``qb_deliveries``: delivery keys done and last seen before the cutoff, except an
  acknowledged command still waiting for its answer (a restarted process answers it);
- ``qb_queue_samples``: queue counts written before the cutoff and at least 14 days ago
  (what the sampler keeps itself: the dead-letter checks look back up to 7 days), except
  each queue's newest (the last count written down);
- ``qb_alert_inbox``: notifications processed before the cutoff; set-aside ones (failed,
  kept for a person) are not done and stay.

Nothing else is touched: the audit events and head, change requests with their items,
outcomes and approvals, plans, incidents and their communications, the schedule, alert
groups and the redrive log are what ``audit verify`` reads or what the work still needs.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import ledger, outbox
from services.alerts import store as inbox
from services.audit import Actor, AuditTrail, anchors
from services.db import reading, transaction
from services.db.tables import AlertInbox, Delivery, OutboxItem, QueueSample
from services.errors import UsageError
from services.reads import samples

_outbox = cast(sa.Table, OutboxItem.__table__)
_deliveries = cast(sa.Table, Delivery.__table__)
_samples = cast(sa.Table, QueueSample.__table__)
_inbox = cast(sa.Table, AlertInbox.__table__)

# The youngest residue a prune may remove: delivery keys must outlive every chat
# platform's redelivery window (Slack retries for minutes, Discord's interaction tokens
# last 15 minutes), and a day leaves a wide margin for a clock that is off.
FLOOR = timedelta(days=1)
CEILING = timedelta(weeks=5200)  # 100 years: a cutoff still far from datetime's year 1
BATCH = 1000  # rows one transaction deletes at most (and one audit event reports)
# SQLite has one write lock, and a writer waiting for it retries at most 100 ms apart
# (its busy handler): a pause this long between batches lets serve's writes in.
SQLITE_PAUSE = 0.1
ACTION = "db.pruned"
ACTOR = Actor.system("db prune")
_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
_AGE = re.compile(r"([+-]?\d+)([a-z]*)")


def parse_age(text: str) -> timedelta:
    """``--older-than``: a whole number and a unit, ``12h``, ``30d`` or ``8w``, at least
    ``FLOOR``; anything else is a usage error that says what is allowed."""
    given = text.strip().lower()
    match = _AGE.fullmatch(given)
    example = "e.g. --older-than 30d (units: h hours, d days, w weeks)"
    if match is None:
        raise UsageError(f"--older-than {text!r}: expected a whole number and a unit, {example}")
    number, unit = int(match.group(1)), match.group(2)
    if not unit:
        raise UsageError(f"--older-than {text!r}: the number needs a unit, {example}")
    if unit not in _UNITS:
        raise UsageError(f"--older-than {text!r}: unknown unit {unit!r}, {example}")
    if number <= 0:
        raise UsageError(f"--older-than {text!r}: the age must be positive, {example}")
    if number > CEILING // _UNITS[unit]:
        raise UsageError(f"--older-than {text!r}: at most {CEILING.days // 7}w (100 years)")
    age = number * _UNITS[unit]
    if age < FLOOR:
        raise UsageError(
            f"--older-than {text!r}: at least 24h (1d): delivery keys must outlive the chat "
            "platforms' redelivery windows (docs/retention.md)"
        )
    return age


def describe_age(age: timedelta) -> str:
    """An age as ``parse_age`` takes it, in the largest unit that divides it."""
    for unit in ("w", "d", "h"):
        if age % _UNITS[unit] == timedelta(0):
            return f"{age // _UNITS[unit]}{unit}"
    return str(age)


@dataclass(frozen=True)
class Kept:
    """Rows a prune keeps although they are old: read once, at the start of a run."""

    samples: tuple[int, ...]  # each queue's newest count's id


@dataclass(frozen=True)
class Residue:
    """One table's residue: what it is, its key (the batches walk it in order) and which
    rows are done and older than a cutoff."""

    table: sa.Table
    what: str
    key: sa.Column[object]
    condition: Callable[[datetime, Kept], sa.ColumnElement[bool]]
    at_least: timedelta = timedelta(0)  # kept this long whatever the age given

    @property
    def name(self) -> str:
        return self.table.name

    def cutoff(self, now: datetime, age: timedelta) -> datetime:
        return now - max(age, self.at_least)


def _outbox_done(cutoff: datetime, kept: Kept) -> sa.ColumnElement[bool]:
    return outbox.done_before(cutoff, spare=anchors.newest_post())


def _deliveries_done(cutoff: datetime, kept: Kept) -> sa.ColumnElement[bool]:
    return ledger.done_before(cutoff)


def _samples_old(cutoff: datetime, kept: Kept) -> sa.ColumnElement[bool]:
    old = _samples.c.at < cutoff
    return sa.and_(old, _samples.c.id.not_in(kept.samples)) if kept.samples else old


def _inbox_processed(cutoff: datetime, kept: Kept) -> sa.ColumnElement[bool]:
    return inbox.processed_before(cutoff)


RESIDUE: tuple[Residue, ...] = (
    Residue(_outbox, "chat posts done (sent or closed)", _outbox.c.id, _outbox_done),
    Residue(_deliveries, "delivery keys done", _deliveries.c.key, _deliveries_done),
    Residue(_samples, "queue counts", _samples.c.id, _samples_old, at_least=samples.KEEP),
    Residue(_inbox, "alert notifications processed", _inbox.c.id, _inbox_processed),
)


@dataclass
class Removed:
    """One table's rows removed (or, dry, that would be) before its cutoff, and in how
    many batches."""

    table: str
    what: str
    cutoff: datetime
    rows: int = 0
    batches: int = 0


@dataclass
class PruneReport:
    cutoff: datetime
    age: timedelta
    dry_run: bool
    run: str = ""  # the id every audit event of the run carries
    tables: list[Removed] = field(default_factory=list)
    events: int = 0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    def lines(self) -> list[str]:
        """What the CLI prints: a heading, one line per table, and what was audited."""
        verb = "would remove" if self.dry_run else "removed"
        head = (
            f"{'dry run: ' if self.dry_run else ''}prune older than {describe_age(self.age)} "
            f"(cutoff {self.cutoff:%Y-%m-%d %H:%M:%S} UTC)"
        )
        width = max(len(t.table) for t in self.tables) if self.tables else 5
        out = [head, f"  {'table':<{width}}  {'rows':>10}  {'cutoff (UTC)':<19}  what"]
        out += [
            f"  {t.table:<{width}}  {t.rows:>10,}  {t.cutoff:%Y-%m-%d %H:%M:%S}  {t.what}"
            for t in self.tables
        ]
        out.append(f"  {'total':<{width}}  {self.rows:>10,}  {'':<19}  {verb}")
        if self.dry_run:
            out.append("nothing was deleted and no audit event written (dry run)")
        else:
            out.append(
                f"{self.events} audit event(s) {ACTION} (run {self.run}), one per batch of "
                f"at most {BATCH} rows"
            )
        return out


async def _kept(conn: AsyncConnection) -> Kept:
    newest = await conn.execute(sa.select(sa.func.max(_samples.c.id)).group_by(_samples.c.queue))
    return Kept(samples=tuple(int(i) for i in newest.scalars()))


async def count(engine: AsyncEngine, *, age: timedelta, now: datetime) -> PruneReport:
    """The dry run: how many rows each table would lose, in one snapshot; writes nothing."""
    report = PruneReport(cutoff=now - age, age=age, dry_run=True)
    async with reading(engine) as conn:
        kept = await _kept(conn)
        for residue in RESIDUE:
            cutoff = residue.cutoff(now, age)
            found = await conn.execute(
                sa.select(sa.func.count())
                .select_from(residue.table)
                .where(residue.condition(cutoff, kept))
            )
            report.tables.append(
                Removed(residue.name, residue.what, cutoff, int(found.scalar_one()))
            )
    return report


async def prune(
    engine: AsyncEngine,
    trail: AuditTrail,
    *,
    age: timedelta,
    now: datetime,
    actor: Actor = ACTOR,
    batch: int = BATCH,
    pause: float = SQLITE_PAUSE,
) -> PruneReport:
    """Remove each table's residue older than ``now - age``, walking the table's key in
    batches of at most ``batch`` rows: each batch is one transaction that deletes its rows
    and appends one ``db.pruned`` audit event saying what went, stamped ``now`` (the
    run's time; a batch that found nothing to delete writes none). On SQLite it pauses
    ``pause`` seconds between batches, so that writers waiting for the one write lock
    get it. A failure leaves the batches before it committed, each with its event, and a
    run again goes on where it stopped."""
    report = PruneReport(cutoff=now - age, age=age, dry_run=False, run=secrets.token_hex(4))
    async with reading(engine) as conn:
        kept = await _kept(conn)
    for residue in RESIDUE:
        removed = Removed(residue.name, residue.what, residue.cutoff(now, age))
        report.tables.append(removed)
        condition = residue.condition(removed.cutoff, kept)
        kept_for = describe_age(max(age, residue.at_least))
        after: object = None
        while True:
            async with transaction(engine, subject=residue.name) as conn:
                found, last, gone = await _one_batch(
                    conn, residue, condition, after=after, batch=batch
                )
                if gone:
                    removed.rows += gone
                    removed.batches += 1
                    report.events += 1
                    await trail.append(
                        conn,
                        action=ACTION,
                        actor=actor,
                        at=now,
                        reason=f"retention: {residue.what} older than {kept_for}",
                        details={
                            "table": residue.name,
                            "rows": gone,
                            "cutoff": removed.cutoff.isoformat(),
                            "older_than": kept_for,
                            "run": report.run,
                            "batch": removed.batches,
                        },
                    )
            if found < batch:
                break
            after = last
            if engine.dialect.name == "sqlite":
                await asyncio.sleep(pause)
    return report


async def _one_batch(
    conn: AsyncConnection,
    residue: Residue,
    condition: sa.ColumnElement[bool],
    *,
    after: object,
    batch: int,
) -> tuple[int, object, int]:
    """Delete the next batch past ``after`` in key order: (rows the batch found, its last
    key, rows deleted). The delete repeats the condition, so a row that changed since it
    was found (a delivery seen again) stays."""
    key = residue.key
    page = sa.select(key).where(condition)
    if after is not None:
        page = page.where(key > after)
    window = page.order_by(key).limit(batch).subquery()
    found, last = (
        await conn.execute(sa.select(sa.func.count(), sa.func.max(window.c[key.name])))
    ).one()
    if not found:
        return 0, after, 0
    bounds = [key <= last, condition] if after is None else [key > after, key <= last, condition]
    result = await conn.execute(residue.table.delete().where(*bounds))
    return int(found), last, int(result.rowcount)
