"""Triage latency on a 1,000,000-row estate of each profile, against the bare status count.

Builds a throw-away PostgreSQL database (named for the run; ``qb_bench_triage`` when it is
kept or reused) holding one estate of each profile (``worker_queue``: 1,000,000 rows in
dev_r_worker_queue; ``message_job``:
1,000,000 queue_messages over ~1,000,000 clip_jobs and video_assets plus job_events),
filled server-side with ``INSERT ... SELECT ... FROM generate_series`` and a realistic
mix: ~90% done/COMPLETED, a few % failed/DLQ with varied error texts (ids, numbers,
URLs, so signatures matter), queued/PENDING backlog, claimed/PROCESSING rows of which
some are stuck, and duplicate queued rows/messages. Then it applies the recommended
indexes exactly as ``queuebot estate indexes --print`` ships them and runs VACUUM ANALYZE.

For each profile it times ``QueueReads.triage`` and the bare
``SELECT status, count(*) FROM <table> GROUP BY status`` through the same async engine
(20 alternating runs after a warm-up), prints median and p95 of both and their ratio,
and checks the targets: triage p95 <= 250 ms (at 1,000,000 rows) and <= 1.5x the bare
query's p95. It also
times every SQL statement triage issues and prints EXPLAIN (ANALYZE, BUFFERS) of the
slowest one.

    .venv/bin/python -m bench.triage                  # with the recommended indexes
    .venv/bin/python -m bench.triage --no-indexes     # without them
    .venv/bin/python -m bench.triage --compare        # both, in one build
    .venv/bin/python -m bench.triage --keep           # keep the database afterwards
    .venv/bin/python -m bench.triage --reuse --keep   # reuse a kept database

Exit status: 0 when every phase measured with the recommended indexes meets the targets
(phases without indexes are informational; ``--smoke`` judges nothing), 1 when one misses
them, 2 when the run fails (with its traceback), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.kit.cli import BenchParser, exit_with
from bench.kit.estate import load_profile, message_job_sql, worker_queue_estate
from bench.kit.figures import exit_status, mark, ms, percentile
from bench.kit.scratch import create_named, drop, engine_url, exists, unique_name
from bench.kit.statements import Rule, Statement, StatementTimer, label
from services.config import QueueConfig
from services.db import create_engine, redacted
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.reads.gate import ReadGate
from services.reads.service import QueueReads

DB_NAME = "qb_bench_triage"
GENERATOR_VERSION = "2"  # bump when the data recipe changes; --reuse then rebuilds
ROWS = 1_000_000
RUNS = 20
WARMUP = 3
TARGET_P95_MS = 250.0
TARGET_RATIO = 1.5

QUEUES = {
    "clips": QueueConfig(profile="message_job"),
    "workers": QueueConfig(profile="worker_queue"),
}
BARE_TABLE = {"workers": "dev_r_worker_queue", "clips": "queue_messages"}
ESTATE_TABLES = ("dev_r_worker_queue", "queue_messages", "clip_jobs", "job_events", "video_assets")


# -- database lifecycle ----------------------------------------------------------------------


def database_name(*, keep: bool, reuse: bool, rows: int = ROWS, name: str | None = None) -> str:
    """The named estate ``qb_bench_triage`` when the run keeps or reuses it (on purpose:
    it takes a minute to build, and ``bench.slack_ack`` serves it too), named for its size
    when that is not the default (``qb_bench_triage_10000000``: ten minutes to build, so
    kept beside the 1,000,000-row one, not in its place), or ``name`` when one is given;
    otherwise a name of this run's own, so two runs at once never drop each other's
    database."""
    kept = name or (DB_NAME if rows == ROWS else f"{DB_NAME}_{rows}")
    return kept if keep or reuse else unique_name(DB_NAME)


async def read_meta(url: URL) -> dict[str, str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            exists = await conn.execute(sa.text("SELECT to_regclass('qb_bench_meta')"))
            if exists.scalar_one() is None:
                return {}
            rows = await conn.execute(sa.text("SELECT key, value FROM qb_bench_meta"))
            return {k: v for k, v in rows.all()}
    finally:
        await engine.dispose()


async def write_meta(conn: AsyncConnection, values: Mapping[str, str]) -> None:
    await conn.exec_driver_sql(
        "CREATE TABLE IF NOT EXISTS qb_bench_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
    )
    for key, value in values.items():
        await conn.execute(
            sa.text(
                "INSERT INTO qb_bench_meta VALUES (:k, :v) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            {"k": key, "v": value},
        )


async def build(engine: AsyncEngine, rows: int, now: datetime) -> None:
    print(f"building {rows:,}-row estates of both profiles (server-side generate_series) ...")
    started = time.perf_counter()
    wq, mj = await asyncio.gather(  # two connections: the two builds share the 2 cores
        load_profile(engine, "worker_queue", worker_queue_estate(rows, now)),
        load_profile(engine, "message_job", message_job_sql(rows, now)),
    )
    print(f"  worker_queue {wq:.1f}s, message_job {mj:.1f}s (in parallel)")
    await vacuum_analyze(engine)
    async with engine.connect() as conn:
        await write_meta(
            conn,
            {"version": GENERATOR_VERSION, "rows": str(rows), "built_at": now.isoformat()},
        )
        await conn.commit()
    print(f"  built in {time.perf_counter() - started:.1f}s")


async def vacuum_analyze(engine: AsyncEngine) -> None:
    started = time.perf_counter()
    auto = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with auto.connect() as conn:
        for table in ESTATE_TABLES:
            await conn.exec_driver_sql(f'VACUUM (ANALYZE) "{table}"')
    print(f"  VACUUM ANALYZE {time.perf_counter() - started:.1f}s")


def index_statements(estate: Estate) -> list[tuple[str, str]]:
    """(queue, statement) exactly as ``queuebot estate indexes --print`` prints them."""
    return [
        (name, sql)
        for name, profile in estate.profiles.items()
        for sql in recommended_indexes(profile, "postgresql")
    ]


async def apply_indexes(engine: AsyncEngine, estate: Estate) -> None:
    print("applying the recommended indexes (queuebot estate indexes --print) ...")
    auto = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with auto.connect() as conn:
        for queue, sql in index_statements(estate):
            started = time.perf_counter()
            await conn.exec_driver_sql(sql)
            create = sql.splitlines()[-1]
            print(f"  [{queue}] {time.perf_counter() - started:5.1f}s  {create}")
    await vacuum_analyze(engine)


async def drop_indexes(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                "AND indexname LIKE 'qb\\_%' AND tablename = ANY(:t)"
            ),
            {"t": list(ESTATE_TABLES)},
        )
        names = [r[0] for r in rows.all()]
        for name in names:
            await conn.exec_driver_sql(f'DROP INDEX IF EXISTS "{name}"')
        await conn.commit()
    if names:
        print(f"dropped {len(names)} recommended indexes kept from an earlier run")
        await vacuum_analyze(engine)


async def describe(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        settings = await conn.execute(
            sa.text(
                "SELECT name, setting, unit FROM pg_settings WHERE name IN ('shared_buffers', "
                "'work_mem', 'jit', 'max_parallel_workers_per_gather', 'random_page_cost', "
                "'effective_cache_size') ORDER BY name"
            )
        )
        shown = ", ".join(f"{n}={v}{u or ''}" for n, v, u in settings.all())
        version = (await conn.execute(sa.text("SHOW server_version"))).scalar_one()
        print(f"PostgreSQL {version}; {shown}; client cores={os.cpu_count()}")
        sizes = await conn.execute(
            sa.text(
                "SELECT c.relname, c.reltuples::bigint, pg_relation_size(c.oid), "
                "pg_indexes_size(c.oid) FROM pg_class c WHERE c.relname = ANY(:t) "
                "AND c.relkind = 'r' AND pg_table_is_visible(c.oid) ORDER BY c.relname"
            ),
            {"t": list(ESTATE_TABLES)},
        )
        for name, tuples, heap, idx in sizes.all():
            print(
                f"  {name:<20} {tuples:>10,} rows  heap {heap / 2**20:6.0f} MiB  "
                f"indexes {idx / 2**20:5.0f} MiB"
            )


LABELS: tuple[Rule, ...] = (
    (("RECURSIVE", "FROM clip_jobs"), "job status counts, succeeded estimated (status index walk)"),
    (("RECURSIVE",), "status counts, succeeded estimated (status index walk)"),
    (("letters",), "dead letters by job status (failed jobs first)"),
    (("last_error", "LIMIT"), "newest dead letters' errors and tenants (sample)"),
    (("error_message", "LIMIT"), "newest dead letters' errors (sample)"),
    (("EXISTS",), "duplicates: issues queued twice, beside an active row"),
    (("HAVING",), "duplicate groups (GROUP BY ... HAVING count > 1)"),
    (("JOIN clip_jobs", "GROUP BY"), "dead letters by job status (join)"),
    (("FROM clip_jobs", "GROUP BY"), "job status counts"),
    (("min(",), "oldest pending + stuck (index lookups)"),
    (("GROUP BY",), "status counts"),
)


@dataclass
class Result:
    queue: str
    indexes: bool
    cold: float
    triage: list[float]
    bare: list[float]
    statements: list[tuple[str, list[float], Statement]]
    other: list[float]  # per run: triage time outside the statements
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after
    rows: int = 1_000_000  # the estate's size: the 250 ms target is for 1,000,000 rows

    @property
    def absolute(self) -> bool:
        """Whether the p95 target in milliseconds applies (it was set for 1,000,000 rows;
        a larger estate is held to the ratio alone)."""
        return self.rows <= 1_000_000

    @property
    def ok(self) -> bool:
        p95 = percentile(self.triage, 0.95)
        fast = p95 * 1000 <= TARGET_P95_MS or not self.absolute
        return fast and p95 <= TARGET_RATIO * percentile(self.bare, 0.95)


async def measure(
    engine: AsyncEngine,
    estate: Estate,
    timer: StatementTimer,
    queue: str,
    runs: int,
    indexes: bool,
) -> Result:
    reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
    bare_sql = sa.text(f"SELECT status, count(*) FROM {BARE_TABLE[queue]} GROUP BY status")

    async def bare() -> None:
        async with engine.connect() as conn:
            (await conn.execute(bare_sql)).all()

    started = time.perf_counter()
    await reads.triage(queue=queue)  # the first call also reflects the tables
    cold = time.perf_counter() - started
    for _ in range(WARMUP):
        await reads.triage(queue=queue)
        await bare()
    timer.runs.clear()
    load_before = os.getloadavg()[0]
    triage_s: list[float] = []
    bare_s: list[float] = []
    for _ in range(runs):  # alternate, so drift (cache, autovacuum) hits both alike
        timer.start_run()
        started = time.perf_counter()
        await reads.triage(queue=queue)
        triage_s.append(time.perf_counter() - started)
        timer.stop()
        started = time.perf_counter()
        await bare()
        bare_s.append(time.perf_counter() - started)
    shapes = {len(run) for run in timer.runs}
    statements: list[tuple[str, list[float], Statement]] = []
    other = [
        total - sum(s.seconds for s in run) for total, run in zip(triage_s, timer.runs, strict=True)
    ]
    if len(shapes) == 1:
        # The lanes run at once, so a run's statements finish in no fixed order: match
        # them by what they are, adding up those of one kind within a run.
        firsts: dict[str, Statement] = {}
        for stmt in timer.runs[0]:
            firsts.setdefault(label(stmt.sql, LABELS), stmt)
        for name, first in firsts.items():
            times = [
                sum(s.seconds for s in run if label(s.sql, LABELS) == name) for run in timer.runs
            ]
            statements.append((name, times, first))
    load = (load_before, os.getloadavg()[0])
    return Result(queue, indexes, cold, triage_s, bare_s, statements, other, load)


async def explain(engine: AsyncEngine, stmt: Statement) -> str:
    async with engine.connect() as conn:
        await conn.exec_driver_sql("SET jit = off")  # as triage reads (services/estate/at_once.py)
        rows = await conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS) " + stmt.sql, stmt.params or None
        )
        return "\n".join(f"    {r[0]}" for r in rows.all())


def summary(estate: Estate, queue: str, triage: Any) -> str:
    statuses = ", ".join(
        f"{s.status}={'≈' if s.estimated else ''}{s.count:,}" for s in triage.by_status
    )
    lines = [f"  triage says: total={triage.total:,} ({statuses})"]
    if triage.by_job_status:
        jobs = ", ".join(
            f"{s.status}={'≈' if s.estimated else ''}{s.count:,}" for s in triage.by_job_status
        )
        lines.append(f"    jobs: {jobs}")
    if triage.by_reason:
        lines.append("    reasons: " + ", ".join(f"{c.key}={c.count:,}" for c in triage.by_reason))
    if triage.by_type:
        lines.append(
            f"    {triage.type_title}: "
            + ", ".join(f"{t.key}={t.total:,}" for t in triage.by_type[:6])
        )
    lines.append(
        f"    stuck={triage.stuck}, duplicate groups={triage.duplicate_groups} "
        f"(+{triage.duplicate_rows} rows), beside active={triage.duplicates_of_active}, "
        f"oldest pending age={triage.oldest_pending_age}"
    )
    lines.append(f"    top signatures ({len(triage.by_signature)}):")
    lines.extend(f"      {c.count:>7,}  {c.key[:90]}" for c in triage.by_signature)
    return "\n".join(lines)


def report(result: Result, indexes: bool, smoke: bool = False) -> list[str]:
    t50, t95 = statistics.median(result.triage), percentile(result.triage, 0.95)
    b50, b95 = statistics.median(result.bare), percentile(result.bare, 0.95)
    profile = QUEUES[result.queue].profile
    verdict = mark(result.ok, smoke)
    why = []
    if t95 * 1000 > TARGET_P95_MS and result.absolute:
        why.append(f"p95 {t95 * 1000:.0f} ms > {TARGET_P95_MS:.0f} ms")
    if t95 > TARGET_RATIO * b95:
        why.append(f"p95 ratio {t95 / b95:.2f}x > {TARGET_RATIO:g}x")
    lines = [
        f"{profile} ({'with' if indexes else 'WITHOUT'} recommended indexes), "
        f"{len(result.triage)} runs each; bare = SELECT status, count(*) FROM "
        f"{BARE_TABLE[result.queue]} GROUP BY status",
        f"  load average during the runs: {result.load[0]:.1f} -> {result.load[1]:.1f} "
        f"(on {os.cpu_count()} cores; other work on the host inflates every figure)",
        f"  {'':<34}{'median':>11}{'p95':>12}",
        f"  {'triage':<34}{ms(t50):>11}{ms(t95):>12}",
        f"  {'bare status count':<34}{ms(b50):>11}{ms(b95):>12}",
        f"  {'ratio triage / bare':<34}{t50 / b50:>10.2f}x{t95 / b95:>11.2f}x",
        f"  first triage call (incl. reflection): {result.cold * 1000:.1f} ms",
        (
            f"  targets: p95 <= {TARGET_P95_MS:.0f} ms and <= {TARGET_RATIO:g}x bare -> {verdict}"
            if result.absolute
            else f"  target: p95 <= {TARGET_RATIO:g}x bare (the {TARGET_P95_MS:.0f} ms target "
            f"is for 1,000,000 rows) -> {verdict}"
        )
        + (f" ({'; '.join(why)})" if why else ""),
        "  triage per statement (median / p95, share of triage median):",
    ]
    for pos, (name, times, _stmt) in enumerate(result.statements, 1):
        m = statistics.median(times)
        lines.append(f"    {pos}. {name:<50}{ms(m)} {ms(percentile(times, 0.95))}  {m / t50:5.0%}")
    o = statistics.median(result.other)
    lines.append(
        f"    -  {'outside SQL (checkout, pre-ping, Python)':<50}{ms(o)} "
        f"{ms(percentile(result.other, 0.95))}  {o / t50:5.0%}"
    )
    return lines


async def run_phase(
    engine: AsyncEngine,
    estate: Estate,
    timer: StatementTimer,
    args: argparse.Namespace,
    indexes: bool,
    show_summary: bool,
) -> list[Result]:
    results = []
    for queue in ("workers", "clips"):
        result = await measure(engine, estate, timer, queue, args.runs, indexes)
        result.rows = args.rows
        print()
        print("\n".join(report(result, indexes, args.smoke)))
        if show_summary:
            print(
                summary(
                    estate,
                    queue,
                    await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).triage(queue=queue),
                )
            )
        if result.statements:
            ranked = sorted(result.statements, key=lambda s: -statistics.median(s[1]))
            for name, times, stmt in ranked if args.explain_all else ranked[:1]:
                if stmt.sql.lstrip().upper().startswith(("SET ", "SELECT PG_EXPORT")):
                    continue
                print(f"  statement: {name} (median {statistics.median(times) * 1000:.1f} ms)")
                print("    " + " ".join(stmt.sql.split())[:800])
                print(f"    params: {stmt.params}")
                print(await explain(engine, stmt))
        results.append(result)
    return results


# -- main ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    name = database_name(keep=args.keep, reuse=args.reuse, rows=args.rows, name=args.database)
    url = make_url(engine_url(args.url, name))
    task = asyncio.current_task()
    if task is not None:  # SIGTERM cancels like Ctrl-C does, so the cleanup below runs
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    engine: AsyncEngine | None = None
    maint: AsyncEngine | None = None
    results: list[Result] = []
    try:
        reuse = False
        if exists(args.url, name):
            if args.reuse:
                meta = await read_meta(url)
                reuse = meta.get("version") == GENERATOR_VERSION and meta.get("rows") == str(
                    args.rows
                )
                if not reuse:
                    print(f"{name} exists but does not hold this build; rebuilding it")
            if not reuse:
                drop(args.url, name)
        if not reuse:
            create_named(args.url, name)
        print(f"database {redacted(url)} ({'reused' if reuse else 'fresh'})")

        # Loading, indexing and VACUUM go through a non-pooling engine; the reads go
        # through the engine the bot itself would use (services.db.create_engine).
        maint = create_async_engine(url, poolclass=NullPool)
        engine = create_engine(url.render_as_string(hide_password=False))
        timer = StatementTimer()
        timer.attach(engine)
        if reuse:
            built_at = datetime.fromisoformat((await read_meta(url))["built_at"])
        else:
            built_at = datetime.now(UTC)
            await build(maint, args.rows, built_at)
        # The clock is pinned to the build time, so a reused estate reads the same
        # (the same rows pending, stuck, ...) as a fresh one.
        estate = Estate(engine=engine, queues=dict(QUEUES), clock=lambda: built_at)

        phases = [False, True] if args.compare else [not args.no_indexes]
        first = True
        for indexes in phases:
            if indexes:
                await apply_indexes(maint, estate)
            else:
                await drop_indexes(maint)
            print()
            await describe(engine)
            results += await run_phase(engine, estate, timer, args, indexes, first)
            first = False

        print()
        print("summary (triage p95 vs target; ratio = triage p95 / bare p95):")
        for r in results:
            t95, b95 = percentile(r.triage, 0.95), percentile(r.bare, 0.95)
            print(
                f"  {QUEUES[r.queue].profile:<13} {'indexes' if r.indexes else 'no indexes':<11}"
                f" triage p95 {t95 * 1000:7.1f} ms  bare p95 {b95 * 1000:7.1f} ms"
                f"  ratio {t95 / b95:5.2f}x  {mark(r.ok, args.smoke)}"
            )
    finally:
        for each in (engine, maint):
            if each is not None:
                await each.dispose()
        if args.keep:
            print(f"kept {name} (reuse it with --reuse --keep)")
        else:
            drop(args.url, name)
            print(f"dropped {name}")
    indexed = [r for r in results if r.indexes]
    return exit_status(all(r.ok for r in indexed), args.smoke)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--runs", full=RUNS, smoke=3, help="timed runs per query")
    parser.size("--rows", full=ROWS, smoke=5_000, help="rows per estate")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--no-indexes", action="store_true", help="measure without the recommended indexes"
    )
    mode.add_argument(
        "--compare", action="store_true", help="measure without, then with, the indexes"
    )
    parser.add_argument(
        "--explain-all",
        action="store_true",
        help="EXPLAIN (ANALYZE, BUFFERS) every statement triage issues, not only the slowest",
    )
    parser.add_argument("--keep", action="store_true", help=f"keep {DB_NAME} afterwards")
    parser.add_argument(
        "--reuse", action="store_true", help=f"reuse {DB_NAME} if it already holds this build"
    )
    parser.add_argument(
        "--database",
        metavar="NAME",
        help=f"the kept or reused database's name (default {DB_NAME}, or named for --rows)",
    )
    return parser.read(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    exit_with(main)
