"""What queuebot's own tables grow by, on PostgreSQL: the figures of docs/retention.md.

One scratch database (``qb_bench_retention_<pid>_<random>``, dropped at the end) holding a
message_job estate of dead letters (``bench.redrive``'s). Measured, each as the growth
of the tables it writes, in two ways: ``pg_total_relation_size`` (pages on disk, with
indexes and TOAST, after VACUUM) and the sum of ``pg_column_size`` over the new rows (the
rows' own bytes, without indexes, page overhead or free space):

1. a redrive, each a change request and its approval: after a warm-up one (the tables'
   first pages), 50 of 1 job each, then one of ``--jobs`` (default 2,000); the growth of
   the change request, its items, outcomes and approval and the audit events. Per job:
   the large request less the mean one-job request, divided by ``--jobs`` less one; per
   request besides its jobs: the mean one-job request less one job.
2. alerts: ``--groups`` groups (default 50) of 40 Alertmanager notifications each, in
   ``bench.alerts``' pattern (A fires, B joins, both resolve, with repeats), stored
   and processed through the alert desk: the inbox, the groups and the chat posts queued
   in the outbox. Per notification received, and per group.
3. a Slack slash command's delivery key (with what it asked and where to answer), done
   and answered, ``--commands`` times (default 2,000); and a queue's count written down
   (``qb_queue_samples``), 1,440 times (a day at the default once a minute).
4. ``db prune`` itself: ``--prune-rows`` (default 100,000) delivery keys 40 days old
   removed with ``--older-than 30d``: rows/s and the time of one batch (its delete and its
   audit event, one transaction: the longest any row lock is held), on the PostgreSQL
   database and on a SQLite file in a temporary directory (where a batch holds the
   database's write lock).

    .venv/bin/python -m bench.retention [--url ADMIN_URL] [--jobs 2000] [--groups 50]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.kit import changes as kit
from bench.kit.alertmanager import sequence
from bench.kit.cli import BenchParser, exit_with
from bench.kit.scratch import create, drop
from bot.slack.payloads import command_delivery, request_of
from services import retention
from services.alerts.payload import parse
from services.audit import Actor, AuditTrail
from services.config.alerts import AlertsConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.estate import Estate
from services.ledger import DeliveryLedger
from services.reads import samples

DB = "qb_bench_retention"
CHANGE_TABLES = (
    "qb_change_requests",
    "qb_change_items",
    "qb_change_outcomes",
    "qb_approvals",
    "qb_audit_events",
)
ALERT_TABLES = ("qb_alert_inbox", "qb_alert_groups", "qb_outbox")
PER_GROUP = 40


async def sizes(engine: AsyncEngine, tables: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Each table's (pg_total_relation_size, sum of pg_column_size over its rows), after a
    VACUUM so that dead rows' space is free space (counted on disk, not in the rows)."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text(f"VACUUM {', '.join(tables)}"))
        out = {}
        for table in tables:
            row = (
                await conn.execute(
                    sa.text(
                        f"SELECT pg_total_relation_size('{table}'), "
                        f"coalesce(sum(pg_column_size(t.*)), 0) FROM {table} AS t"
                    )
                )
            ).one()
            out[table] = (int(row[0]), int(row[1]))
        return out


def grown(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    return {t: (after[t][0] - before[t][0], after[t][1] - before[t][1]) for t in before}


def show(title: str, growth: Mapping[str, tuple[float, float]], per: float, unit: str) -> None:
    print(title)
    print(f"  {'table':<22} {'on disk':>12} {'rows':>12}   (bytes per {unit})")
    for table, (disk, rows) in growth.items():
        print(f"  {table:<22} {disk / per:>12,.0f} {rows / per:>12,.0f}")
    disk = sum(d for d, _ in growth.values())
    rows = sum(r for _, r in growth.values())
    print(f"  {'total':<22} {disk / per:>12,.0f} {rows / per:>12,.0f}")


async def redrive(engine: AsyncEngine, jobs: int, small: int) -> None:
    """``small`` one-job requests (for the fixed cost of a request), then one of ``jobs``."""
    await kit.dead_letters(engine, jobs + small + 1, then=kit.FOR_REDRIVE)
    ids = await kit.job_ids(engine)
    changes = kit.wire(engine, jobs=jobs).changes

    async def one(chosen: list[str]) -> dict[str, tuple[int, int]]:
        before = await sizes(engine, CHANGE_TABLES)
        done = await kit.redrive(
            changes,
            "clips",
            chosen,
            reason="Operator returned DLQ message to PENDING after root-cause fix",
            requester=Actor("alice", "slack", "U0ALICE01"),
            approver=Actor("bob", "slack", "U0BOB001"),
        )
        assert done.changed == len(chosen), f"changed {done.changed} of {len(chosen)}"
        return grown(before, await sizes(engine, CHANGE_TABLES))

    await one(ids[:1])  # the first pages and index pages of each table
    before = await sizes(engine, CHANGE_TABLES)
    for n in range(1, small + 1):
        await one(ids[n : n + 1])
    mean = {
        t: (d / small, r / small)
        for t, (d, r) in grown(before, await sizes(engine, CHANGE_TABLES)).items()
    }
    big = await one(ids[small + 1 : small + 1 + jobs])
    per_job = {
        t: ((big[t][0] - mean[t][0]) / (jobs - 1), (big[t][1] - mean[t][1]) / (jobs - 1))
        for t in big
    }
    show(
        f"redrive: per job redriven (a request of {jobs:,} jobs against one of 1 job)",
        per_job,
        1,
        "job",
    )
    fixed = {t: (mean[t][0] - per_job[t][0], mean[t][1] - per_job[t][1]) for t in mean}
    show(
        f"redrive: per request besides its jobs (mean of {small} one-job requests less a job)",
        fixed,
        1,
        "request",
    )


async def prune_speed(engine: AsyncEngine, rows: int) -> None:
    """How fast ``db prune`` removes ``rows`` old delivery keys, in its batches."""
    old = datetime.now(UTC) - timedelta(days=40)
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            fill = (
                "INSERT INTO qb_deliveries (key, seen_at, state, done_at) "
                "SELECT 'bench:' || g, :old, 'done', :old FROM generate_series(1, :n) g"
            )
        else:
            fill = (
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :n) "
                "INSERT INTO qb_deliveries (key, seen_at, state, done_at) "
                "SELECT 'bench:' || n, :old, 'done', :old FROM g"
            )
            old = old.replace(tzinfo=None)  # SQLite keeps UTC without a zone
        await conn.execute(sa.text(fill), {"n": rows, "old": old})
    t0 = time.perf_counter()
    report = await retention.prune(
        engine, AuditTrail(), age=timedelta(days=30), now=datetime.now(UTC)
    )
    seconds = time.perf_counter() - t0
    removed = next(t for t in report.tables if t.table == "qb_deliveries")
    assert removed.rows == rows, removed
    paused = (
        (removed.batches - 1) * retention.SQLITE_PAUSE if engine.dialect.name == "sqlite" else 0
    )
    print(
        f"db prune on {engine.dialect.name}: {rows:,} old delivery keys removed in "
        f"{seconds:.2f} s ({rows / seconds:,.0f} rows/s), {removed.batches} batches of at most "
        f"{retention.BATCH} rows, {1000 * (seconds - paused) / removed.batches:.1f} ms per batch "
        "(its delete and its audit event, one transaction)"
        + (f", {paused:.1f} s of it the pauses between batches" if paused else "")
    )
    async with engine.connect() as conn:
        assert (await AuditTrail().verify(conn)).ok


async def alerts(engine: AsyncEngine, groups: int) -> None:
    desk = kit.wire(engine, alerts=AlertsConfig()).alerts
    before = await sizes(engine, ALERT_TABLES)
    base = datetime.now(UTC).replace(microsecond=0)
    for group in range(groups):
        for body in sequence(group, base, PER_GROUP):
            await desk.receive(parse(body))
    while await desk.process_due():
        pass
    growth = grown(before, await sizes(engine, ALERT_TABLES))
    received = groups * PER_GROUP
    show(
        f"alerts: {received:,} notifications in {groups} groups, per notification",
        growth,
        received,
        "notification",
    )
    show("alerts: the same, per group of 40 notifications", growth, groups, "group")


async def small_rows(engine: AsyncEngine, commands: int, counts: int) -> None:
    ledger = DeliveryLedger(engine=engine, clock=lambda: datetime.now(UTC))
    before = await sizes(engine, ("qb_deliveries",))
    for n in range(commands):
        body = {
            "trigger_id": f"7123456789012.1234567890123.{n:032x}",
            "user_id": "U0ALICE01",
            "channel_id": "C0OPERATORS",
            "response_url": f"https://hooks.slack.com/commands/T0TEAM0001/71234567{n:05d}/abcdefABCDEF0123456789ab",
            "text": "dlq clips",
        }
        delivery = command_delivery(body, group="queue", slack_api="https://slack.com/api/")
        claim = await ledger.claim(delivery.key, request=request_of(delivery))
        assert claim is not None
        await ledger.finish(claim)
    show(
        f"delivery keys: {commands:,} Slack slash commands, done and answered",
        grown(before, await sizes(engine, ("qb_deliveries",))),
        commands,
        "command",
    )
    profile = Estate(engine=engine, queues=dict(kit.CLIPS)).profile("clips")
    before = await sizes(engine, ("qb_queue_samples",))
    start = datetime.now(UTC) - timedelta(days=1)
    for minute in range(counts):
        async with engine.begin() as conn:
            await samples.record(conn, profile=profile, now=start + timedelta(minutes=minute))
    show(
        f"queue counts: {counts:,} of one queue's counts, once a minute (1,440: a day)",
        grown(before, await sizes(engine, ("qb_queue_samples",))),
        counts,
        "count",
    )


async def measure(url: str, args: argparse.Namespace) -> None:
    engine = create_engine(url)
    try:
        await redrive(engine, args.jobs, args.small)
        print()
        await alerts(engine, args.groups)
        print()
        await small_rows(engine, args.commands, args.counts)
        print()
        await prune_speed(engine, args.prune_rows)
    finally:
        await engine.dispose()
    with tempfile.TemporaryDirectory() as directory:
        lite = create_engine(f"sqlite+aiosqlite:///{directory}/queuebot.db")
        try:
            await upgrade(lite)
            await prune_speed(lite, args.prune_rows)
        finally:
            await lite.dispose()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--jobs", full=2000, smoke=10, help="jobs of the large redrive")
    parser.size("--small", full=50, smoke=3, help="one-job redrives, for a request's own cost")
    parser.size("--groups", full=50, smoke=2, help="alert groups of 40 notifications")
    parser.size("--commands", full=2000, smoke=20, help="slash commands' delivery keys")
    parser.size("--counts", full=1440, smoke=20, help="a queue's counts written down")
    parser.size("--prune-rows", full=100_000, smoke=2000, help="old keys db prune removes")
    args = parser.read(argv)
    if args.jobs < 2 or min(args.small, args.groups, args.commands, args.prune_rows) < 1:
        parser.error("--jobs must be at least 2, the other counts at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    name, url = create(args.url, DB)
    try:
        asyncio.run(measure(url, args))
    finally:
        drop(args.url, name)
    return 0


if __name__ == "__main__":
    exit_with(main)
