"""The board of one person: how long it takes to read and word, on PostgreSQL, with 50
change requests pending, 10 plans active and 5 incidents open in a database in use.

Builds a scratch PostgreSQL database of its own (``qb_bench_board_<pid>_<random>``,
dropped at the end), migrated, with the queues as the triage bench fills them (``clips``:
message_job, ``--rows`` messages, a few % dead-lettered; ``workers``: worker_queue,
``--rows`` rows) and their recommended indexes, and as many queues as plans (one plan per
queue): ``w3``, ``w4`` ... configured over ``workers``' table, each counted on its own.
Then it fills queuebot's tables with SQL as a database in use holds them: ``--history``
decided change requests beside the ``--pending`` pending ones (four in five asked by
alice, so waiting for bob's approval, the rest bob's own; half of alice's need two
approvals and have one), ``--plans`` active plans (a third of them halted, each halt in
the audit trail) of ``--plan-jobs`` jobs each beside ``--history`` / 10 ended plans of
200, ``--incidents`` open incidents with three audiences each (told, due, missed) beside
``--history`` / 10 resolved ones, ``--events`` other audit events, and fourteen days of
each queue's counts written down every minute; then VACUUM ANALYZE.

It times ``BoardReader.board`` for bob and the board's words (``board_message``), one
after the other as ``/queue board`` runs them, ``--runs`` times after a warm-up, through
a read gate that keeps nothing (each board counts every queue's dead letters again; serve
keeps a count for ``[reads] fresh_seconds``), and prints p50, p95, p99 and max, the
statements one board sends and the slowest of them; and, alternating with the boards, a
floor: as many bare statements over two connections at once, what the round trips alone
cost on the machine as it is then (the figures move with its load).

Target: p95 <= 50 ms.

    .venv/bin/python -m bench.board [--url ADMIN_URL] [--runs 200] [--pending 50] [--plans 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.kit.changes import wire
from bench.kit.cli import BenchParser, exit_with
from bench.kit.estate import build_worker_queue, load_profile, message_job_sql
from bench.kit.figures import judge, loadavg, ms, percentile, spread
from bench.kit.scratch import scratch
from bench.kit.statements import StatementTimer
from services.board import BoardReader, board_message
from services.config import QueueConfig
from services.db import create_engine, reading
from services.db.migrate import upgrade
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.people import Person
from services.reads.gate import ReadGate
from services.reads.service import QueueReads

DB = "qb_bench_board"
TARGET_P95_MS = 50.0
WARMUP = 5


def queues(n: int) -> dict[str, QueueConfig]:
    """``clips`` (message_job), ``workers`` and more worker_queue queues (``w3``, ``w4``
    ...) over the same table, to ``n`` queues: a plan active on each of ``--plans`` of them
    (one plan per queue), each counted for the board on its own."""
    more = {f"w{i}": QueueConfig(profile="worker_queue") for i in range(3, n + 1)}
    return {
        "clips": QueueConfig(profile="message_job"),
        "workers": QueueConfig(profile="worker_queue"),
        **more,
    }


BOB = Person("bob", frozenset({"operator", "approver"}))
_SELECTOR = '{"error_like": "ffmpeg", "sample": 5}'
_PREVIEW = (
    '{"by_signature": [["ffmpeg exited with code <n>", 40]], "checks": [["reason given", '
    '"ok", "fix deployed"]], "schedule": [5, 10, 20, 5], "plan": null}'
)
_WAVES = (
    '{"schedule": [5, 10, 20, 40, 80, 160, 320, 640, 725], "waves": ['
    '{"number": 0, "size": 5, "started_at": "2026-12-07T10:00:00Z", "changed": 5, '
    '"finished_at": "2026-12-07T10:00:10Z", "succeeded": 5, "outcome": "ok"}, '
    '{"number": 1, "size": 10, "started_at": "2026-12-07T10:00:10Z", "changed": 10, '
    '"finished_at": "2026-12-07T10:00:30Z", "succeeded": 10, "outcome": "ok"}, '
    '{"number": 2, "size": 20, "started_at": "2026-12-07T10:00:30Z", "changed": 20, '
    '"outcome": "running"}]}'
)


def fill_sql(args: argparse.Namespace) -> list[str]:
    """Statements that fill queuebot's tables as a database in use holds them."""
    pending, plans, jobs, history = args.pending, args.plans, args.plan_jobs, args.history
    names = list(queues(max(args.plans, 2)))
    on = ", ".join(f"('{q}', {i + 1})" for i, q in enumerate(names[:plans]))
    each = ", ".join(f"('{q}')" for q in names)
    ended = max(history // 10, 1)
    alices = pending * 4 // 5
    request_values = f"""'clips', 'message_job', '{_SELECTOR}', '{{}}', '{{"items": []}}',
              'h', '{_PREVIEW}', 40, '{{}}'"""
    return [
        "ALTER TABLE qb_audit_events DISABLE TRIGGER USER",  # filled by hand, not chained
        f"""INSERT INTO qb_change_requests (kind, queue, profile, selector, targets,
              ineligible, snapshot_hash, preview, eligible_count, origin, state,
              requested_at, expires_at, requester_person, requester_platform,
              requester_account, reason, approvals_required)
            SELECT CASE WHEN g % 2 = 0 THEN 'plan' ELSE 'redrive' END, {request_values},
              CASE WHEN g % 5 = 0 THEN 'expired' ELSE 'executed' END,
              now() - interval '30 days' + g * interval '1 minute', now() - interval '1 day',
              'alice', 'slack', 'U0ALICE', 'an earlier fix', 1
            FROM generate_series(1, {history}) g""",
        f"""INSERT INTO qb_change_requests (kind, queue, profile, selector, targets,
              ineligible, snapshot_hash, preview, eligible_count, origin, state,
              requested_at, expires_at, requester_person, requester_platform,
              requester_account, reason, approvals_required)
            SELECT CASE WHEN g % 2 = 0 THEN 'plan' ELSE 'redrive' END, {request_values},
              'pending', now(), now() + interval '1 day',
              CASE WHEN g <= {alices} THEN 'alice' ELSE 'bob' END, 'slack', 'U0' || g,
              'OOM fix deployed in release ' || g, CASE WHEN g % 2 = 0 THEN 2 ELSE 1 END
            FROM generate_series(1, {pending}) g""",
        """INSERT INTO qb_approvals (request_id, person, platform, account, decision, at)
            SELECT id, CASE WHEN state = 'pending' THEN 'carol' ELSE 'bob' END, 'slack',
              'U0', 'approve', requested_at
            FROM qb_change_requests
            WHERE state = 'executed' OR (state = 'pending' AND approvals_required = 2
              AND requester_person = 'alice')""",
        f"""INSERT INTO qb_plans (queue, profile, request_id, state, reason, requester,
              approvers, sample, max_wave, velocity, poll_seconds, total, cursor, wave,
              wave_size, dead_at_wave_start, waves, origin, created_at, updated_at, note)
            SELECT 'clips', 'message_job', g, CASE WHEN g % 3 = 0 THEN 'rolled_back'
                ELSE 'completed' END, 'an earlier fix', 'alice', '{{"people": ["bob"]}}',
              5, 1000, 50, 2, 200, 200, 3, 45, 0, '{_WAVES}', '{{}}', now(), now(), NULL
            FROM generate_series(1, {ended}) g""",
        f"""INSERT INTO qb_plans (queue, profile, request_id, state, reason, requester,
              approvers, sample, max_wave, velocity, poll_seconds, total, cursor, wave,
              wave_size, dead_at_wave_start, waves, origin, created_at, updated_at, note)
            SELECT v.q, 'message_job', g, CASE WHEN g % 3 = 0 THEN 'halted'
                ELSE 'running' END, 'OOM fix deployed', 'alice', '{{"people": ["bob"]}}',
              5, 1000, 50, 2, {jobs}, 35, 2, 20, 0, '{_WAVES}', '{{}}', now(), now(),
              CASE WHEN g % 3 = 0 THEN 'HALTED: 3 job(s) of wave 2 re-entered the
                dead-letter state; the same signature as before: the fix did not hold.
                Nothing more is redriven.' END
            FROM (VALUES {on}) v(q, g)""",
        f"""INSERT INTO qb_plan_items (plan_id, seq, job_id, wave, state, signature, original)
            SELECT p.id, s, p.id || '-' || s, CASE WHEN s <= 5 THEN 0 WHEN s <= 15 THEN 1
                WHEN s <= 35 THEN 2 END,
              CASE WHEN p.state IN ('completed', 'rolled_back') THEN 'succeeded'
                   WHEN s <= 15 THEN 'succeeded' WHEN s <= 35 THEN 'redriven'
                   ELSE 'waiting' END, 'ffmpeg exited with code <n>', '{{}}'
            FROM qb_plans p, generate_series(1, {max(jobs, 200)}) s
            WHERE s <= p.total""",
        f"""INSERT INTO qb_audit_events (occurred_at, action, actor_platform, actor_account,
              actor_person, subject, reason, details, prev_hash, hash)
            SELECT now() - interval '30 days' + g * interval '1 second',
              CASE WHEN g % 50 = 0 THEN 'plan.halted' ELSE 'change.approved' END, 'slack',
              'U0', 'bob', CASE WHEN g % 50 = 0 THEN 'P-' || (g % {ended} + 1)
                ELSE 'CR-' || g END, 'an earlier halt', '{{}}', md5((g - 1)::text),
              md5(g::text) || md5(g::text)
            FROM generate_series(1, {args.events}) g""",
        """INSERT INTO qb_audit_events (occurred_at, action, actor_platform, actor_account,
              actor_person, subject, reason, details, prev_hash, hash)
            SELECT now(), 'plan.halted', 'queuebot', 'queuebot', NULL, 'P-' || p.id, p.note,
              '{}', md5('h' || p.id), md5('h' || p.id) || md5('halt' || p.id)
            FROM qb_plans p WHERE p.state = 'halted'""",
        f"""INSERT INTO qb_incidents (scenario, summary, state, blocks_redrive, declared_at,
              queue, lead, lead_platform, lead_account)
            SELECT 'gd:failed-jobs-accumulating', 'clips die of upstream timeout ' || g,
              'resolved', false, now() - interval '30 days', 'clips', 'dora', 'slack', 'U0'
            FROM generate_series(1, {ended}) g""",
        f"""INSERT INTO qb_incidents (scenario, summary, state, blocks_redrive, declared_at,
              queue, lead, lead_platform, lead_account)
            SELECT 'gd:queue-loss', 'jobs stopped finishing ' || g, 'open', true,
              now() - interval '10 minutes', 'workers', 'dora', 'slack', 'U0DORA'
            FROM generate_series(1, {args.incidents}) g""",
        """INSERT INTO qb_incident_obligations (incident_id, audience, channel_dependency,
              within_ms, due_at, state, met_at, met_by)
            SELECT i.id, v.a, 'dep:notification-channel', v.ms,
              i.declared_at + v.ms * interval '1 millisecond',
              CASE WHEN i.state = 'resolved' OR v.a = 'operators' THEN 'met'
                   WHEN v.a = 'customers' THEN 'missed' ELSE 'pending' END,
              CASE WHEN i.state = 'resolved' OR v.a = 'operators' THEN i.declared_at END,
              CASE WHEN i.state = 'resolved' OR v.a = 'operators' THEN 'dora' END
            FROM qb_incidents i, (VALUES ('operators', 300000), ('actors', 900000),
              ('customers', 60000)) v(a, ms)""",
        f"""INSERT INTO qb_queue_samples (queue, at, total, dead, pending, counts)
            SELECT q, now() - m * interval '1 minute', 100000, 3000 - m % 100, 500, '{{}}'
            FROM (VALUES {each}) v(q), generate_series(0, 14 * 1440) m""",
    ]


async def build(url: str, args: argparse.Namespace) -> None:
    """The queues and their indexes, queuebot's tables filled, VACUUM ANALYZE."""
    started = time.perf_counter()
    now = datetime.now(UTC)
    await build_worker_queue(url, args.rows, now)
    maint = create_async_engine(url, poolclass=NullPool)
    try:
        await load_profile(maint, "message_job", message_job_sql(args.rows, now))
        estate = Estate(engine=maint, queues={"clips": QueueConfig(profile="message_job")})
        auto = maint.execution_options(isolation_level="AUTOCOMMIT")
        async with auto.connect() as conn:
            for sql in recommended_indexes(estate.profile("clips"), "postgresql"):
                await conn.exec_driver_sql(sql)
        engine = create_engine(url)
        await upgrade(engine)
        await engine.dispose()
        async with maint.begin() as conn:
            for sql in fill_sql(args):
                await conn.exec_driver_sql(sql.replace("%", "%%"))
        async with auto.connect() as conn:
            await conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        await maint.dispose()
    print(
        f"built in {time.perf_counter() - started:.1f}s: {max(args.plans, 2)} queues, clips "
        f"and workers of {args.rows:,} rows (w3 ... over workers' table); "
        f"{args.pending} pending requests beside {args.history:,} "
        f"decided; {args.plans} active plans of {args.plan_jobs:,} jobs beside "
        f"{max(args.history // 10, 1):,} ended; {args.incidents} open incidents; "
        f"{args.events:,} other audit events; 14 days of counts"
    )


@dataclass(frozen=True)
class Timed:
    boards: list[float]  # each board, read and worded (seconds)
    floors: list[float]  # each floor run, alternating with the boards
    cpu: float  # this process's CPU seconds per board
    statements: int  # that one board sends


async def floor(engine: AsyncEngine, statements: int) -> float:
    """The board's statements as bare ``SELECT 1``, over two connections at once as the
    board reads (queuebot's tables beside the queues): what any board's round trips cost
    on this machine now."""

    async def some(n: int) -> None:
        async with reading(engine) as conn:
            for _ in range(n):
                await conn.execute(sa.text("SELECT 1"))

    started = time.perf_counter()
    await asyncio.gather(some(statements // 2), some(statements - statements // 2))
    return time.perf_counter() - started


async def measure(engine: AsyncEngine, args: argparse.Namespace) -> Timed:
    """Boards and floor runs, alternating, after a warm-up."""
    configured = queues(max(args.plans, 2))
    estate = Estate(engine=engine, queues=configured)
    services = wire(engine, configured, estate=estate)
    reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
    reader = BoardReader(engine, reads, services.changes.kinds, estate.clock)
    timer = StatementTimer()
    timer.attach(engine)
    board = await reader.board(person=BOB)
    print(
        f"bob's board: {len(board.waiting)} waiting for his approval, {len(board.own)} of "
        f"his own, {len(board.plans)} active plans, {len(board.incidents)} open incidents, "
        f"{len(board.queues)} queues; {len(board_message(board).blocks)} blocks"
    )
    timer.start_run()
    board_message(await reader.board(person=BOB))
    timer.stop()
    statements = len(timer.runs[-1])
    print(f"statements in one board: {statements}; the slowest of one:")
    for s in timer.slowest(3):
        print(f"  {ms(s.seconds)}  {s.flat(100)}")
    for _ in range(WARMUP):
        board_message(await reader.board(person=BOB))
        await floor(engine, statements)
    boards: list[float] = []
    floors: list[float] = []
    cpu = 0.0
    for _ in range(args.runs):
        cpu_started = time.process_time()
        started = time.perf_counter()
        board_message(await reader.board(person=BOB))
        boards.append(time.perf_counter() - started)
        cpu += time.process_time() - cpu_started
        floors.append(await floor(engine, statements))
    return Timed(boards, floors, cpu / args.runs, statements)


async def run(args: argparse.Namespace) -> int:
    print(f"load average {loadavg()}")
    with scratch(args.url, DB) as (_, url):
        await build(url, args)
        engine = create_engine(url)
        try:
            timed = await measure(engine, args)
        finally:
            await engine.dispose()
    p95 = percentile(timed.boards, 0.95) * 1000
    floor95 = percentile(timed.floors, 0.95) * 1000
    print(f"board (read and words), {len(timed.boards)} runs: {spread(timed.boards)}")
    print(f"floor ({timed.statements} bare statements, two connections): {spread(timed.floors)}")
    print(
        f"board p95 / floor p95: {p95 / floor95:.2f}x; this process's CPU per board "
        f"{timed.cpu * 1000:.1f} ms"
    )
    print(f"load average {loadavg()}")
    return judge(
        [(f"p95 {p95:.1f} ms <= {TARGET_P95_MS:.0f} ms", p95 <= TARGET_P95_MS)],
        args.smoke,
        f"the board of a person with {args.pending} pending requests, {args.plans} plans "
        f"and {args.incidents} incidents",
    )


def parse_args(argv: Sequence[str] | None = None, doc: str | None = None) -> argparse.Namespace:
    """The board's sizes (``doc``: the help of a bench that builds the same, bench.home)."""
    parser = BenchParser(doc or __doc__)
    parser.size("--rows", full=100_000, smoke=2_000, help="rows of each queue")
    parser.size("--pending", full=50, smoke=10, help="change requests pending")
    parser.size("--plans", full=10, smoke=3, help="plans active")
    parser.size("--plan-jobs", full=2_000, smoke=50, help="jobs in each active plan")
    parser.size("--incidents", full=5, smoke=2, help="incidents open")
    parser.size("--history", full=20_000, smoke=100, help="decided change requests")
    parser.size("--events", full=200_000, smoke=1_000, help="other audit events")
    parser.size("--runs", full=200, smoke=10, help="boards timed")
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    exit_with(main)
