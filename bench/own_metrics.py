"""GET /metrics: the reading of queuebot's own database (change requests, plans, incidents,
outbox, schedule) on a database that has been in use for years.

Builds a scratch PostgreSQL database of its own (``qb_bench_own_metrics_<pid>_<random>``,
dropped at the end), migrated, and fills queuebot's tables with SQL: ``--plans`` plans of
``--jobs`` jobs each (all ended but the newest, which runs), a halt on every tenth plan,
``--events`` other audit events, ``--requests`` change requests, ``--outbox`` done outbox
items and 1,000 undone, 10,000 scheduled items (100 due), ``--incidents`` resolved
incidents and 5 open ones, with two communications each; then VACUUM ANALYZE. Through the
``Metrics`` the bot wires (no queue configured, so only its own database is read) it times:

1. the first reading, which counts every ended plan once;
2. readings after it (``--reads``), which count only the plans new since the last
   reading and those active then or now;
3. the same again with the oldest plan of all the active one (halted for as long as the
   database has been in use), on a new ``Metrics`` (a restart): its first reading, then
   the readings after it.

    .venv/bin/python -m bench.own_metrics [--url ADMIN_URL] [--plans 5000] [--jobs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import gauges, p50_p99_max
from bench.kit.scratch import scratch
from services.db import create_engine
from services.db.migrate import upgrade
from services.metrics import Metrics

DB = "qb_bench_own_metrics"


def fill_sql(args: argparse.Namespace) -> list[str]:
    """Statements that fill queuebot's tables as years of use would."""
    plans, jobs = args.plans, args.jobs
    waves = '\'{"schedule": [5, 10, 20, 40, 80, 45], "waves": []}\''
    return [
        "ALTER TABLE qb_audit_events DISABLE TRIGGER USER",  # filled by hand, not chained
        f"""INSERT INTO qb_plans (id, queue, profile, request_id, state, reason, requester,
            approvers, sample, max_wave, velocity, poll_seconds, total, cursor, wave,
            wave_size, dead_at_wave_start, waves, origin, created_at, updated_at)
            SELECT g, 'q' || (g %% 20), 'message_job', g,
              CASE WHEN g = {plans} THEN 'running' WHEN g %% 3 = 0 THEN 'rolled_back'
                   ELSE 'completed' END,
              'fix deployed', 'alice', '{{"people": ["bob"]}}', 5, 100, 2.0, 2.0, {jobs},
              {jobs}, 5, 45, 0, {waves}, '{{}}', now(), now()
            FROM generate_series(1, {plans}) g""",
        f"SELECT setval('qb_plans_id_seq', {plans})",
        f"""INSERT INTO qb_plan_items (plan_id, seq, job_id, wave, state, signature, original)
            SELECT p, s, p || '-' || s, s %% 6,
              CASE WHEN s %% 10 = 0 THEN 'redead' WHEN s %% 7 = 0 THEN 'skipped'
                   ELSE 'succeeded' END, 'sig', '{{}}'
            FROM generate_series(1, {plans}) p, generate_series(1, {jobs}) s""",
        f"""INSERT INTO qb_audit_events (occurred_at, action, actor_platform, actor_account,
            subject, details, prev_hash, hash)
            SELECT now(), CASE WHEN g <= {plans} AND g %% 10 = 0 THEN 'plan.halted'
                               ELSE 'change.approved' END,
              'slack', 'U0', CASE WHEN g <= {plans} THEN 'P-' || g ELSE 'CR-' || g END,
              '{{}}', md5((g - 1)::text), md5(g::text) || md5(g::text)
            FROM generate_series(1, {plans + args.events}) g""",
        f"""INSERT INTO qb_change_requests (kind, queue, profile, state, requested_at,
            expires_at, requester_person, requester_platform, requester_account, reason,
            selector, targets, ineligible, snapshot_hash, preview, eligible_count,
            approvals_required, origin)
            SELECT 'redrive', 'q1', 'message_job',
              CASE WHEN g %% 5 = 0 THEN 'expired' ELSE 'executed' END, now(), now(), 'alice',
              'slack', 'U0', 'fix', '{{}}', '{{}}', '{{}}', 'h', '{{}}', 3, 1, '{{}}'
            FROM generate_series(1, {args.requests}) g""",
        f"""INSERT INTO qb_outbox (kind, subject, payload, created_at, due_at, done_at)
            SELECT 'plan.news', 'P-' || g, '{{}}', now() - interval '1 day',
              now() - interval '1 day', CASE WHEN g > {args.outbox} THEN NULL
              ELSE now() - interval '1 day' END
            FROM generate_series(1, {args.outbox + 1000}) g""",
        """INSERT INTO qb_schedule (kind, subject, due_at, attempts, created_at)
            SELECT 'bench', 's' || g, now() + (g - 100) * interval '1 second', 0, now()
            FROM generate_series(1, 10000) g""",
        f"""INSERT INTO qb_incidents (scenario, summary, state, blocks_redrive, declared_at)
            SELECT 'gd:queue-loss', 'jobs stopped',
              CASE WHEN g > {args.incidents} THEN 'open' ELSE 'resolved' END, true, now()
            FROM generate_series(1, {args.incidents + 5}) g""",
        """INSERT INTO qb_incident_obligations (incident_id, audience, channel_dependency,
            within_ms, due_at, state)
            SELECT i.id, a, 'chat', 300000, now() - interval '1 minute',
              CASE WHEN i.state = 'open' THEN 'pending' ELSE 'met' END
            FROM qb_incidents i, (VALUES ('operators'), ('actors')) v(a)""",
    ]


async def timed(metrics: Metrics, clock: list[float]) -> float:
    clock[0] += 15
    started = time.perf_counter()
    await metrics.refresh_if_due(wait=600)
    return time.perf_counter() - started


async def readings(engine: AsyncEngine, reads: int) -> tuple[float, list[float], bytes]:
    clock = [0.0]
    metrics = Metrics(estate=None, state_engine=engine, monotonic=lambda: clock[0])
    first = await timed(metrics, clock)
    later = [await timed(metrics, clock) for _ in range(reads)]
    body = await metrics.exposition()
    await metrics.close()
    return first, later, body


async def run(args: argparse.Namespace) -> int:
    with scratch(args.url, DB) as (_, url):
        engine = create_engine(url)
        await upgrade(engine)
        maint = create_async_engine(url, poolclass=NullPool)
        started = time.perf_counter()
        async with maint.begin() as conn:
            for sql in fill_sql(args):
                await conn.exec_driver_sql(sql)
        auto = maint.execution_options(isolation_level="AUTOCOMMIT")
        async with auto.connect() as conn:
            await conn.exec_driver_sql("VACUUM ANALYZE")
        print(
            f"filled in {time.perf_counter() - started:.1f}s: {args.plans:,} plans of "
            f"{args.jobs} jobs ({args.plans * args.jobs:,} plan items), "
            f"{args.plans + args.events:,} audit events, {args.requests:,} change requests, "
            f"{args.outbox + 1000:,} outbox items, {args.incidents + 5:,} incidents; "
            f"load average {os.getloadavg()[0]:.2f}"
        )

        first, later, body = await readings(engine, args.reads)
        print()
        print(f"first reading (every ended plan counted once): {first * 1000:7.1f} ms")
        print(f"  plans {gauges(body, 'queuebot_plans')}")
        print(
            f"  jobs redriven {gauges(body, 'queuebot_plan_jobs_redriven_total')}, "
            f"halts {gauges(body, 'queuebot_plan_halts_total')}, "
            f"outbox pending {gauges(body, 'queuebot_outbox_pending')}, "
            f"scheduler due {gauges(body, 'queuebot_scheduler_due')}, "
            f"obligations {gauges(body, 'queuebot_incident_obligations')}"
        )
        print(f"later readings (the newest plan active):   {p50_p99_max(later)}")

        async with maint.begin() as conn:  # the oldest plan of all is active again
            await conn.exec_driver_sql("UPDATE qb_plans SET state = 'completed' WHERE id > 1")
            await conn.exec_driver_sql("UPDATE qb_plans SET state = 'halted' WHERE id = 1")
        first, worst, _ = await readings(engine, args.reads)
        print(f"with the oldest plan active: first reading {first * 1000:7.1f} ms")
        print(f"  later readings:                          {p50_p99_max(worst)}")
        print(f"load average {os.getloadavg()[0]:.2f}")
        await engine.dispose()
        await maint.dispose()
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--plans", full=5000, smoke=20, help="plans, all but one ended")
    parser.size("--jobs", full=200, smoke=5, help="jobs in each plan")
    parser.size("--events", full=1_000_000, smoke=1000, help="other audit events")
    parser.size("--requests", full=50_000, smoke=100, help="change requests")
    parser.size("--outbox", full=500_000, smoke=500, help="done outbox items")
    parser.size("--incidents", full=10_000, smoke=20, help="resolved incidents")
    parser.size("--reads", full=20, smoke=3, help="readings timed")
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    exit_with(main)
