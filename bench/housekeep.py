"""One housekeeping run (the worker-queue retry worker, Parts A-F) over a
1,000,000-row worker_queue on PostgreSQL: wall time and statements issued.

Builds a scratch database of this run's own (``bench/scratch_db.py``), with queuebot's
tables beside the queue (housekeeping needs one database: its changes and their audit
events commit together) and the worker_queue estate of ``bench/triage.py`` (the same
server-side ``generate_series`` recipe: 90 days of history, failures of every reason
with retries 0-2, stale duplicates, stuck claims, duplicate queued rows), the
recommended indexes and VACUUM ANALYZE. Then it times, through the real ``Housekeeper``:

1. a dry run (what the first run would change, nothing written);
2. the first real run, which has the backlog of 90 days to work through;
3. the steady state: a run right after it, as the 10-minute timer finds the table
   (it must change nothing).

Each prints wall time, the statements it issued (every cursor execution, counted with
SQLAlchemy events) and the rows per part. Target: one full run < 2 s. Run it more than
once on a shared machine and report ``uptime``.

    .venv/bin/python bench/housekeep.py [--rows 1000000] [--url postgresql://...]

Exit status: 0 when every run meets the target and the second run changed nothing, 1
otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from scratch_db import create, drop
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from triage import WQ_BESIDE_ACTIVE, WQ_DUPLICATES, worker_queue_sql

from services.audit import Actor, AuditTrail
from services.config import QueueConfig
from services.config.housekeeping import HousekeepingConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.housekeeping.report import RunReport
from services.housekeeping.run import Housekeeper

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGET_SECONDS = 2.0
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Counter:
    """Every cursor execution while a run is timed, with how long it took."""

    def __init__(self) -> None:
        self.count = 0
        self.slowest: list[tuple[float, str]] = []

    def attach(self, engine: AsyncEngine) -> None:
        event.listen(engine.sync_engine, "before_cursor_execute", self._before)
        event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    def reset(self) -> None:
        self.count = 0
        self.slowest = []

    def _before(self, conn: Any, *_: Any) -> None:
        conn.info["qb_t0"] = time.perf_counter()

    def _after(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.count += 1
        took = time.perf_counter() - conn.info.pop("qb_t0", time.perf_counter())
        self.slowest.append((took, " ".join(statement.split())[:110]))
        self.slowest = sorted(self.slowest, reverse=True)[:3]


async def build(url: str, rows: int) -> None:
    engine = create_engine(url)
    try:
        started = time.perf_counter()
        await upgrade(engine)
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SET synchronous_commit = off")
            await create_estate_tables(conn, "worker_queue")
            for sql in worker_queue_sql(rows - WQ_DUPLICATES - WQ_BESIDE_ACTIVE, NOW):
                await conn.exec_driver_sql(sql.replace("%", "%%"))
            await conn.commit()
        estate = Estate(engine=engine, queues={"workers": QueueConfig(profile="worker_queue")})
        auto = engine.execution_options(isolation_level="AUTOCOMMIT")
        async with auto.connect() as conn:
            for sql in recommended_indexes(estate.profile("workers"), "postgresql"):
                await conn.exec_driver_sql(sql)
            await conn.exec_driver_sql("VACUUM (ANALYZE) dev_r_worker_queue")
            total = (
                await conn.exec_driver_sql("SELECT count(*) FROM dev_r_worker_queue")
            ).scalar_one()
        print(
            f"built {total:,} worker_queue rows, indexes, VACUUM ANALYZE in "
            f"{time.perf_counter() - started:.1f}s"
        )
    finally:
        await engine.dispose()


async def timed(
    keeper: Housekeeper, counter: Counter, *, dry_run: bool
) -> tuple[float, int, RunReport]:
    counter.reset()
    started = time.perf_counter()
    report = await keeper.run(actor=Actor.system("bench"), dry_run=dry_run)
    return time.perf_counter() - started, counter.count, report


def per_part(report: RunReport) -> str:
    counts: dict[str, int] = {}
    for (_, part, _), ids in report.rows().items():
        counts[part] = counts.get(part, 0) + len(ids)
    return ", ".join(f"{p} {n:,}" for p, n in sorted(counts.items())) or "nothing"


async def measure(url: str) -> bool:
    engine = create_engine(url)
    counter = Counter()
    counter.attach(engine)
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
            seconds, statements, report = await timed(keeper, counter, dry_run=dry)
            verdict = "ok" if seconds < TARGET_SECONDS else f"MISSES {TARGET_SECONDS:.0f} s"
            print(
                f"{label:13s} {seconds * 1000:8.0f} ms  {statements:3d} statements  "
                f"{report.changed:7,} rows ({per_part(report)})  {verdict}"
            )
            for took, sql in counter.slowest:
                print(f"    {took * 1000:6.0f} ms  {sql}")
            ok = ok and seconds < TARGET_SECONDS
            if label == "steady state" and report.changed:
                print("the run after the first changed rows again: it must change nothing")
                ok = False
        return ok
    finally:
        await engine.dispose()


async def main(args: argparse.Namespace) -> int:
    if args.reuse:  # a database an earlier --keep left, as it was left (first run done)
        url = make_url(args.url).set(drivername="postgresql+psycopg", database=args.reuse)
        return 0 if await measure(url.render_as_string(hide_password=False)) else 1
    name, url = create(args.url, "qb_bench_housekeep")
    try:
        await build(url, args.rows)
        ok = await measure(url)
    finally:
        if args.keep:
            print(f"kept database {name} (--reuse {name} times runs on it again)")
        else:
            drop(args.url, name)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--url", default=os.environ.get("QUEUEBOT_BENCH_URL", DEFAULT_URL))
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", metavar="NAME", help="time runs on a kept database")
    sys.exit(asyncio.run(main(parser.parse_args())))
