"""One housekeeping run (the worker-queue retry worker, Parts A-F) over a
1,000,000-row worker_queue on PostgreSQL: wall time and statements issued.

Builds a scratch database of this run's own (``bench.kit.scratch``), with queuebot's
tables beside the queue (housekeeping needs one database: its changes and their audit
events commit together) and the worker_queue estate of ``bench.triage`` (the same
server-side ``generate_series`` recipe, ``bench.kit.estate``: 90 days of history, failures
of every reason with retries 0-2, stale duplicates, stuck claims, duplicate queued rows),
the recommended indexes and VACUUM ANALYZE. Then it times, through the real ``Housekeeper``:

1. a dry run (what the first run would change, nothing written);
2. the first real run, which has the backlog of 90 days to work through;
3. the steady state: a run right after it, as the 10-minute timer finds the table
   (it must change nothing).

Each prints wall time, the statements it issued (every cursor execution, counted with
SQLAlchemy events) and the rows per part. Target: one full run < 2 s. Run it more than
once on a shared machine and report ``uptime``.

    .venv/bin/python -m bench.housekeep [--rows 1000000] [--url postgresql://...]

Exit status: 0 when every run meets the target and the second run changed nothing (or
with ``--smoke``, which judges nothing), 1 otherwise, 2 when the run fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from bench.kit.cli import BenchParser, exit_with
from bench.kit.estate import build_worker_queue
from bench.kit.figures import exit_status, loadavg
from bench.kit.scratch import create, drop, engine_url
from bench.kit.statements import StatementTimer
from services.audit import Actor, AuditTrail
from services.config import QueueConfig
from services.config.housekeeping import HousekeepingConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.estate import Estate
from services.housekeeping.report import RunReport
from services.housekeeping.run import Housekeeper

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGET_SECONDS = 2.0
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def build(url: str, rows: int) -> None:
    engine = create_engine(url)
    try:
        await upgrade(engine)
        took = await build_worker_queue(url, rows, NOW)
        async with engine.connect() as conn:
            total = (
                await conn.exec_driver_sql("SELECT count(*) FROM dev_r_worker_queue")
            ).scalar_one()
        print(f"built {total:,} worker_queue rows, indexes, VACUUM ANALYZE in {took:.1f}s")
    finally:
        await engine.dispose()


async def timed(
    keeper: Housekeeper, timer: StatementTimer, *, dry_run: bool
) -> tuple[float, RunReport]:
    timer.start_run()
    started = time.perf_counter()
    try:
        report = await keeper.run(actor=Actor.system("bench"), dry_run=dry_run)
    finally:
        timer.stop()
    return time.perf_counter() - started, report


def per_part(report: RunReport) -> str:
    counts: dict[str, int] = {}
    for (_, part, _), ids in report.rows().items():
        counts[part] = counts.get(part, 0) + len(ids)
    return ", ".join(f"{p} {n:,}" for p, n in sorted(counts.items())) or "nothing"


async def measure(url: str, smoke: bool) -> bool:
    engine = create_engine(url)
    timer = StatementTimer()
    timer.attach(engine)
    try:
        estate = Estate(engine=engine, queues={"workers": QueueConfig(profile="worker_queue")})
        keeper = Housekeeper(
            engine=engine,
            estate=estate,
            audit=AuditTrail(),
            config=HousekeepingConfig(),
            clock=lambda: NOW,
            chat=True,  # retry-exhausted rows are told through alerts, then retired
        )
        async with engine.connect() as conn:  # reflect once, outside the timings
            await estate.profile("workers").tables(conn)
        ok = True
        for label, dry in (("dry run", True), ("first run", False), ("steady state", False)):
            seconds, report = await timed(keeper, timer, dry_run=dry)
            verdict = "ok" if seconds < TARGET_SECONDS else f"MISSES {TARGET_SECONDS:.0f} s"
            print(
                f"{label:13s} {seconds * 1000:8.0f} ms  {len(timer.runs[-1]):3d} statements  "
                f"{report.changed:7,} rows ({per_part(report)})  {'smoke' if smoke else verdict}"
            )
            for statement in timer.slowest(3):
                print(f"    {statement.seconds * 1000:6.0f} ms  {statement.flat()}")
            ok = ok and seconds < TARGET_SECONDS
            if label == "steady state" and report.changed:
                print("the run after the first changed rows again: it must change nothing")
                ok = False
        return ok
    finally:
        await engine.dispose()


async def run(args: argparse.Namespace) -> int:
    if args.reuse:  # a database an earlier --keep left, as it was left (first run done)
        ok = await measure(engine_url(args.url, args.reuse), args.smoke)
        return exit_status(ok, args.smoke)
    name, url = create(args.url, "qb_bench_housekeep")
    try:
        await build(url, args.rows)
        ok = await measure(url, args.smoke)
    finally:
        if args.keep:
            print(f"kept database {name} (--reuse {name} times runs on it again)")
        else:
            drop(args.url, name)
    print(f"load: {loadavg()}")
    return exit_status(ok, args.smoke)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__, url=os.environ.get("QUEUEBOT_BENCH_URL", DEFAULT_URL))
    parser.size("--rows", full=1_000_000, smoke=5_000, help="rows in the worker_queue")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", metavar="NAME", help="time runs on a kept database")
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    exit_with(main)
