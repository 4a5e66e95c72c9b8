"""A 100,000-job staged redrive on PostgreSQL with an instant simulated worker.

The plan runs at its velocity cap on a simulated clock: every wave waits its turn in
simulated time, while the plan's own work (each scheduler tick: checking the previous
wave, redriving the next one with its events and audit) is timed for real. The target is
the plan's own overhead below 2% of the wall time the velocity cap imposes.

A second target: a tick never reads more of ``qb_plan_items`` than the waves it works on.
Every statement a tick issues against that table is recorded as it is sent, and after the
tick (it has committed by then) each is replayed as ``EXPLAIN (ANALYZE, FORMAT JSON)`` with
the same parameters in a transaction that is rolled back. PostgreSQL's own counts give the
rows each statement read there: (actual rows + rows removed by filter + rows removed by
index recheck) x loops, summed over the plan nodes that read the table or one of its
indexes (a bitmap heap scan stands for its bitmap index scans, which find the same rows;
the update node itself reads nothing). No statement may read more than one wave, and a
tick, summed over its statements, no more than twice the wave it judged and the wave it
started (each is read, then written: its items, then their new state), plus a little for
the plan's own bookkeeping. Replayed after the commit, a statement that filters on an
item's state may match fewer rows, but the rows it scanned and filtered out still count.

A third target, with ``--memory``: the request and the approval of a plan run in bounded
memory whatever the number of dead letters. The run stops after the approval and prints
the process's peak resident memory (``ru_maxrss``: the dead letters are built by the
database, so the peak is the plan's): at most 150 MB for 1,000,000 dead letters.

    .venv/bin/python -m bench.redrive_plan [--url ADMIN_URL] [--jobs 100000] [--velocity 50]
    .venv/bin/python -m bench.redrive_plan --memory --jobs 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.kit.changes import APPROVER, CLIPS, REQUESTER, dead_letters, wire
from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import peak_rss_mb, status_mb, verdict
from bench.kit.scratch import create, drop
from services.changes.model import ChangeKind
from services.config import DatabaseConfig, RedriveConfig
from services.db import create_engine
from services.estate.estate import Estate
from services.estate.ops import Selector
from services.plans.store import TICK
from services.reads import samples

DB = "qb_bench_plan"
# a wave's reads find its dead letters by state and claim time, the next ones by
# availability; a job's events by the job
INDEXES = (
    "CREATE INDEX bench_qm_status_claimed ON queue_messages (status, claimed_at)",
    "CREATE INDEX bench_qm_job ON queue_messages (job_id)",
    "CREATE INDEX bench_qm_status_available ON queue_messages (status, available_at)",
    "CREATE INDEX bench_ev_agg ON job_events (aggregate_id, created_at)",
)
WORKER = """
UPDATE clip_jobs SET status = 'SUCCEEDED', progress_percent = 100, finished_at = now()
WHERE id IN (SELECT job_id FROM queue_messages WHERE status = 'PENDING');
UPDATE queue_messages SET status = 'COMPLETED', claimed_at = now() WHERE status = 'PENDING';
"""


ITEMS = "qb_plan_items"
SLACK = 5  # rows a tick may read beyond its waves: the plan's own bookkeeping
OVERHEAD_TARGET = 0.02
PEAK_TARGET_MB = 150  # a plan's request and approval at 1,000,000 dead letters


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Recorder:
    """Every statement against ``qb_plan_items`` sent while ``on``, as the driver got it
    (psycopg's ``%(name)s`` text with its parameters; a list of them for an executemany)."""

    on: bool = False
    seen: list[tuple[str, list[Any]]] = field(default_factory=list)

    def __call__(
        self,
        conn: Any,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        if self.on and ITEMS in statement:
            sets = list(parameters) if executemany else [parameters]
            self.seen.append((statement, sets))

    def take(self) -> list[tuple[str, list[Any]]]:
        seen, self.seen = self.seen, []
        return seen


@dataclass
class TickReads:
    """What one tick read of ``qb_plan_items``, against the waves it worked on."""

    number: int  # the tick's place in the run, from 1
    previous: int  # the size of the wave that was current when the tick began
    started: int  # the size of the wave it started (0: none)
    by_statement: dict[str, int]

    @property
    def rows(self) -> int:
        return sum(self.by_statement.values())

    @property
    def allowed(self) -> int:
        """A tick reads the wave it judges twice (its items, then marking them) and the
        wave it starts twice (its items, then recording them): no more."""
        return 2 * (self.previous + self.started) + SLACK

    @property
    def statement_allowed(self) -> int:
        """No one statement reads more than one wave."""
        return max(self.previous, self.started) + SLACK

    @property
    def within(self) -> bool:
        return self.rows <= self.allowed and self.heaviest[1] <= self.statement_allowed

    @property
    def ratio(self) -> float:
        return self.rows / max(1, self.previous + self.started)

    @property
    def heaviest(self) -> tuple[str, int]:
        if not self.by_statement:
            return "(none)", 0
        return max(self.by_statement.items(), key=lambda kv: kv[1])


def rows_read(node: dict[str, Any], indexes: set[str], under_heap: bool = False) -> int:
    """Rows the plan node and its children read from ``qb_plan_items`` or its indexes."""
    kind = node.get("Node Type")
    on_items = node.get("Relation Name") == ITEMS or node.get("Index Name") in indexes
    counted = on_items and kind != "ModifyTable"
    if kind == "Bitmap Index Scan" and under_heap:
        counted = False  # its heap scan counts the rows it found
    total = 0.0
    if counted:
        per_loop = (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        total = per_loop * node.get("Actual Loops", 0)  # EXPLAIN gives each per loop
    heap = under_heap or (kind == "Bitmap Heap Scan" and node.get("Relation Name") == ITEMS)
    return round(total) + sum(rows_read(c, indexes, heap) for c in node.get("Plans", []))


async def replay(
    engine: AsyncEngine, statements: list[tuple[str, list[Any]]], indexes: set[str]
) -> dict[str, int]:
    """Each statement's rows read, by EXPLAIN ANALYZE in a transaction rolled back."""
    by_statement: dict[str, int] = {}
    async with engine.connect() as conn:
        tx = await conn.begin()
        try:
            for statement, sets in statements:
                for params in sets:
                    explained = (
                        await conn.exec_driver_sql(
                            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params
                        )
                    ).scalar_one()
                    if isinstance(explained, str):
                        explained = json.loads(explained)
                    rows = rows_read(explained[0]["Plan"], indexes)
                    by_statement[statement] = by_statement.get(statement, 0) + rows
        finally:
            await tx.rollback()
    return by_statement


def one_line(statement: str) -> str:
    """The statement on one line, each IN list of parameters cut to its first (``, ...``)."""
    text = " ".join(statement.split())
    return re.sub(r"(%\((\w+?)_\d+\)s(::\w+)?)(, %\(\2_\d+\)s(::\w+)?)+", r"\1, ...", text)


def compact(statement: str) -> str:
    """``one_line`` with the select list cut to its first column too, so statements that
    differ only after it are told apart within a short line."""
    return re.sub(r"^SELECT (\S+?)(, \S+?)+ FROM ", r"SELECT \1, ... FROM ", one_line(statement))


def short(statement: str, width: int = 150) -> str:
    return compact(statement)[:width]


async def run(url: str, jobs: int, velocity: float, memory: bool, smoke: bool) -> int:
    engine = create_engine(url)  # the plan's: the [database] defaults
    # building a million rows is one long statement: the setup's own engine allows it
    long = 3600.0
    setup = create_engine(
        url,
        settings=DatabaseConfig(
            statement_timeout_seconds=long,
            lock_timeout_seconds=long,
            idle_in_transaction_timeout_seconds=long,
        ),
    )
    t0 = time.perf_counter()
    await dead_letters(setup, jobs, claimed="now() - (g || ' s')::interval", then=INDEXES)
    async with setup.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM ANALYZE"))
    await setup.dispose()
    print(f"built {jobs:,} dead-lettered jobs in {time.perf_counter() - t0:.1f} s")
    async with engine.connect() as conn:
        indexes = {
            str(name)
            for (name,) in await conn.execute(
                sa.text("SELECT indexname FROM pg_indexes WHERE tablename = :t"), {"t": ITEMS}
            )
        }
    recorder = Recorder()
    event.listen(engine.sync_engine, "before_cursor_execute", recorder)

    clock = Clock(datetime.now(UTC))
    config = RedriveConfig(velocity=velocity, poll_seconds=5, max_wave=1000)
    # only the plan's ticks run here, nothing periodic
    estate = Estate(engine=engine, queues=dict(CLIPS), clock=clock)
    services = wire(engine, estate=estate, clock=clock, jobs=jobs, redrive=config)
    changes, plans = services.changes, services.plans
    async with engine.begin() as conn:
        await samples.record(
            conn, profile=estate.profile("clips"), now=clock.now - timedelta(minutes=15)
        )
    idle = status_mb("VmRSS")
    t1 = time.perf_counter()
    request = await changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(error_like="ffmpeg"),
        reason="bench",
        actor=REQUESTER,
    )
    t2 = time.perf_counter()
    decision = await changes.approve(number=request.number, actor=APPROVER)
    t3 = time.perf_counter()
    plan = int(decision.view.result.plan or 0) if decision.view.result else 0
    print(
        f"plan request (freeze + checks of {request.eligible:,} jobs): {t2 - t1:.2f} s; "
        f"approval + sample: {t3 - t2:.2f} s; {len(request.schedule)} waves"
    )
    peak = peak_rss_mb()
    print(
        f"memory: {idle:.0f} MB resident before the request, peak {peak:.0f} MB through the "
        f"request and the approval of {request.eligible:,} dead letters  (target: peak <= "
        f"{PEAK_TARGET_MB} MB at 1,000,000)"
    )
    if memory:
        await engine.dispose()
        return verdict(peak <= PEAK_TARGET_MB and decision.executed, smoke)

    sched = services.scheduler
    sched.register(TICK, services.plan_engine.tick)
    started = clock.now
    tick_times: list[float] = []
    wave_ticks: list[float] = []
    reads: list[TickReads] = []
    replay_time = 0.0
    worker_time = 0.0
    view = await plans.view(number=plan)
    waves_before = len(view.waves)
    real_start = time.perf_counter()
    while True:
        w0 = time.perf_counter()
        async with engine.begin() as conn:  # the instant worker finishes everything pending
            for statement in WORKER.split(";\n"):
                if statement.strip():
                    await conn.execute(sa.text(statement))
        worker_time += time.perf_counter() - w0
        async with engine.connect() as conn:
            due = (
                await conn.execute(
                    sa.text("SELECT min(due_at) FROM qb_schedule WHERE kind = :k"), {"k": TICK}
                )
            ).scalar_one()
        if due is None:
            break
        clock.now = max(clock.now, due)
        previous = view.waves[-1].size if view.waves else 0
        recorder.on = True
        s0 = time.perf_counter()
        try:
            await sched.run_due()
        finally:
            spent = time.perf_counter() - s0
            recorder.on = False
        tick_times.append(spent)
        view = await plans.view(number=plan)
        started_size = sum(w.size for w in view.waves[waves_before:])
        if len(view.waves) > waves_before:
            wave_ticks.append(spent)
            waves_before = len(view.waves)
        r0 = time.perf_counter()
        by_statement = await replay(engine, recorder.take(), indexes)
        replay_time += time.perf_counter() - r0
        reads.append(TickReads(len(tick_times), previous, started_size, by_statement))
    real = time.perf_counter() - real_start
    view = await plans.view(number=plan)
    await engine.dispose()

    simulated = (clock.now - started).total_seconds()
    overhead = sum(tick_times)
    share = overhead / simulated if simulated else 1.0
    print(
        f"plan state: {view.state.value}; {view.succeeded:,}/{view.total:,} succeeded in "
        f"{len(view.waves)} waves"
    )
    print(
        f"velocity cap {velocity:,.0f} jobs/s -> wall time at the cap "
        f"{simulated:,.0f} s (simulated clock)"
    )
    print(
        f"plan overhead (all ticks, real time): {overhead:.2f} s in {len(tick_times)} "
        f"ticks = {100 * share:.2f}% of the wall time  (target < {100 * OVERHEAD_TARGET:.0f}%)"
    )
    if wave_ticks:
        print(
            f"per wave-starting tick (check previous wave + redrive up to 1,000 jobs + "
            f"events + audit): median {1000 * statistics.median(wave_ticks):.0f} ms, "
            f"max {1000 * max(wave_ticks):.0f} ms"
        )
    print(
        f"engine throughput without the cap: {view.total / overhead:,.0f} jobs/s "
        f"(simulated worker: {worker_time:.1f} s, bench loop {real:.1f} s, of which "
        f"EXPLAIN replays {replay_time:.1f} s)"
    )
    scans_ok = check_reads(reads)
    completed = view.state.value == "completed"
    overhead_ok = share < OVERHEAD_TARGET
    ok = completed and overhead_ok and scans_ok
    print(
        f"completed: {'yes' if completed else 'NO'}; overhead < "
        f"{100 * OVERHEAD_TARGET:.0f}%: {'yes' if overhead_ok else 'NO'}; ticks read only "
        f"their waves: {'yes' if scans_ok else 'NO'}"
    )
    return verdict(ok, smoke)


def check_reads(reads: list[TickReads]) -> bool:
    """Print what the ticks read of the plan's items; True when no statement read more
    than one wave and no tick more than twice the wave it judged and the wave it started
    (plus ``SLACK``)."""
    if not reads:
        print(f"rows read of {ITEMS} per tick: no ticks ran  (target: within their waves)")
        return False
    most = max(reads, key=lambda r: r.rows)
    worst = max(reads, key=lambda r: r.ratio)
    statement, rows = worst.heaviest
    print(
        f"rows read of {ITEMS} per tick (EXPLAIN ANALYZE of every statement of "
        f"{len(reads)} ticks): max {most.rows:,} (tick {most.number}, waves "
        f"{most.previous:,} + {most.started:,}); max ratio to previous + new wave "
        f"{worst.ratio:.2f} (tick {worst.number}: {worst.rows:,} rows, waves "
        f"{worst.previous:,} + {worst.started:,})  (target: a statement <= one wave + {SLACK}, "
        f"a tick <= 2 x (previous + new) + {SLACK})"
    )
    print(f"  heaviest statement of that tick ({rows:,} rows): {short(statement)}")
    single = max(reads, key=lambda r: r.heaviest[1] / max(1, r.previous + r.started))
    statement, rows = single.heaviest
    print(
        f"  largest single statement against its tick's waves: {rows:,} rows (tick "
        f"{single.number}, waves {single.previous:,} + {single.started:,}): {short(statement)}"
    )
    broken = [r for r in reads if not r.within]
    if not broken:
        return True
    numbers = ", ".join(str(r.number) for r in broken[:20]) + (", ..." if len(broken) > 20 else "")
    print(f"  {len(broken)} of {len(reads)} ticks read more than their waves: ticks {numbers}")
    first, worst = broken[0], max(broken, key=lambda r: r.ratio)
    for tick in [first] if worst is first else [first, worst]:
        print(
            f"  tick {tick.number} read {tick.rows:,} rows (allowed {tick.allowed:,}, one "
            f"statement {tick.statement_allowed:,}: waves {tick.previous:,} + {tick.started:,}):"
        )
        for text, n in sorted(tick.by_statement.items(), key=lambda kv: -kv[1]):
            print(f"    {n:>8,} rows  {short(text)}")
        print(f"    its heaviest statement in full: {one_line(tick.heaviest[0])}")
    return False


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--jobs", full=100_000, smoke=300, help="dead letters in the plan")
    parser.add_argument(
        "--velocity",
        type=float,
        default=RedriveConfig().velocity,
        help="the plan's velocity cap in jobs/s (default: the config default)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="stop after the approval and judge the peak memory (try --jobs 1000000)",
    )
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    name, url = create(args.url, DB)  # this run's own: concurrent runs never collide
    try:
        return asyncio.run(run(url, args.jobs, args.velocity, args.memory, args.smoke))
    finally:
        drop(args.url, name)


if __name__ == "__main__":
    exit_with(main)
