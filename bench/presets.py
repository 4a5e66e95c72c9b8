"""Triage and redrive on the job tables of River, pg-boss, Oban, Procrastinate,
graphile-worker, GoodJob, Solid Queue and Que, through queuebot's presets, against bare SQL
in the same run.

One scratch database (``qb_bench_presets_<pid>_<random>``, dropped at the end) with each
system's schema made as the preset tests make it (``bench.preset_tables``) and queuebot's
own tables beside them. Two parts:

1. **Triage against its floor and a bare count** (every preset): ``--rows`` (1,000,000)
   jobs in the system's table, a realistic mix (``bench.preset_tables``), VACUUM ANALYZE.
   After a warm-up, ``--runs`` (20) alternating runs of the preset's triage
   (``profile.triage`` on a read connection of the estate, as ``/queue triage`` reads),
   of its floor and of the bare ``SELECT count(*)`` of the table; then the same with
   ``queue_name`` set (one queue of the table), where the bare count of that queue is
   timed too (graphile-worker's queue is a row of its queues table: the bare count
   looks its id up). **The floor** is the SQL an expert would write by hand for the
   numbers triage prints, estimated, sampled or counted as triage did in that run
   (``bench.preset_floor`` says what it reads), run one after another on one
   connection. On the whole table the bare count of the dead jobs alone is timed too.
   Median, p95, the ratios triage / floor and triage / bare, and triage's statements
   one by one (a cursor hook). Each run ends with its verdicts: triage / floor <= 1.3x
   on every run; triage / bare count(*) (of the queue, on a ``queue_name`` run) <= 1.5x
   where an index finds the dead jobs (River, Oban and Solid Queue ship one; the others
   with ``--dead-index``), ``n/a`` elsewhere, where the floor's target is the one; and a
   summary of every run's verdicts with the load average around it.
2. **A redrive of ``--jobs`` (10,000) dead jobs** per preset: a table of
   ``--redrive-rows`` (100,000) jobs of which exactly ``--jobs`` are dead, restored
   before every measured run from a copy taken after the fill (TRUNCATE and INSERT with
   triggers off, VACUUM ANALYZE, CHECKPOINT; ``--smoke``, which measures nothing, leaves the
   whole server's CHECKPOINT out), so every run starts from the same rows.
   ``--repeat`` (3) alternating runs of the system's own retry and of queuebot's path as
   ``bench.redrive`` times it: one change request over every dead job's id and its
   approval, timed together. The system's own retry is, where it retries many jobs by
   id, that retry over every dead job's id sent as one array (pg-boss 10's
   ``retry(name, ids)``, its ``retryJobs`` statement, once per queue name; River's
   ``JobRetry`` statement over ``id = any(ids)``, as its ``*Many`` queries take ids:
   River's client retries one job a call); elsewhere the bare set-based retry over all
   its dead jobs (as the preset tests' RETRY functions write it; for Procrastinate its
   ``procrastinate_retry_job_v2`` called over those rows, and for graphile-worker its
   ``reschedule_jobs`` once per count of attempts, as the preset calls it, each in one
   ``DO`` block; Solid Queue's two statements in one transaction). Nothing but a count
   comes back to the process, and each runs in one transaction. Medians, the load
   average, queuebot as a share of that retry (bare / queuebot, as ``bench.redrive``
   puts it), with the statements of queuebot's runs that took the most time. Target,
   judged from 100,000 dead jobs (``--jobs 100000 --redrive-rows 100000``) on pg-boss
   and River: queuebot >= 50% of the system's many-ids retry's jobs/s.

``--dead-index`` then makes, on each system that ships no index finding its dead jobs
(pg-boss, Procrastinate, graphile-worker, GoodJob, Que), the partial index on them
``queuebot estate indexes`` prints, and times triage again: before and after in one run.

It asserts no timing: its PASS and FAIL lines judge the ratios of the run they print
(triage's; the redrive's on pg-boss and River, from 100,000 dead jobs, which also sets the
exit status), and the other systems' redrive shares are read from the output. The load
average is printed with each part; on a shared host the ratios are steadier than the
milliseconds.

    .venv/bin/python -m bench.presets [--url ADMIN_URL] [--rows 1000000] [--runs 20]
        [--jobs 10000] [--redrive-rows 100000] [--repeat 3] [--only triage|redrive]
        [--presets river,oban,pg-boss,procrastinate,graphile-worker,good_job,solid_queue,que]
        [--explain] [--dead-index]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.kit.changes import redrive, wire
from bench.kit.cli import BenchParser, exit_with, names
from bench.kit.figures import judge, loadavg, ms, percentile
from bench.kit.scratch import conninfo, create, drop
from bench.kit.statements import Rule, StatementTimer, label
from bench.preset_floor import floor_statements
from bench.preset_tables import DEAD, DEAD_WHERE, TABLES, fill, make_schemas
from services.audit import AuditTrail
from services.config import QueueConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate import estimate
from services.estate.estate import Estate
from services.estate.indexes import dead_jobs_index
from services.estate.system.dead_index import statements

DB = "qb_bench_presets"
SYSTEMS = (
    "river", "oban", "pg-boss", "procrastinate", "graphile-worker", "good_job", "solid_queue",
    "que",
)  # fmt: skip
TRIAGED = (
    "river", "oban", "pg-boss", "procrastinate", "graphile-worker", "good_job", "solid_queue",
    "que",
)  # fmt: skip
# The systems that ship an index finding their dead jobs (the others get it with --dead-index)
DEAD_INDEXED = ("river", "oban", "solid_queue")
FLOOR_TARGET = 1.3  # triage / its floor, every run
SEED = 1  # the seed of a triage's sample of pages here (its floor reads the same)
COUNT_TARGET = 1.5  # triage / the bare count(*), where an index finds the dead jobs
WARMUP = 3
FILLS_AT_ONCE = 2  # the triage tables filled at the same time (one connection each)
ONE_QUEUE = {  # the queue_name runs
    "river": "email",
    "oban": "email",
    "procrastinate": "email",
    "pg-boss": "email-send",
    "graphile-worker": "email",
    "good_job": "mailers",
    "solid_queue": "mailers",
    "que": "mailers",
}
COUNT = {  # the job table the bare count reads
    "river": "river_job",
    "oban": "oban_jobs",
    "procrastinate": "procrastinate_jobs",
    "pg-boss": "pgboss.job",
    "graphile-worker": "graphile_worker._private_jobs",
    "good_job": "good_jobs",
    "solid_queue": "solid_queue_jobs",
    "que": "que_jobs",
}
QUEUE_COLUMN = {
    "river": "queue",
    "oban": "queue",
    "procrastinate": "queue_name",
    "pg-boss": "name",
    "good_job": "queue_name",
    "solid_queue": "queue_name",
    "que": "queue",
}
# The bare count's WHERE for one queue (``:q``, its name).
QUEUE_WHERE = {
    **{preset: f"{column} = :q" for preset, column in QUEUE_COLUMN.items()},
    "graphile-worker": "job_queue_id = (SELECT id FROM graphile_worker._private_job_queues"
    " WHERE queue_name = :q)",
}
# The system's own retry, set-based over its dead jobs (the preset tests' RETRY functions):
# one statement, or several run in one transaction.
RETRY: dict[str, str | tuple[str, ...]] = {
    "river": "UPDATE river_job SET state = 'available', finalized_at = NULL,"
    " scheduled_at = now(), max_attempts = CASE WHEN attempt >= max_attempts"
    " THEN attempt + 1 ELSE max_attempts END WHERE state = 'discarded'",
    "oban": "UPDATE oban_jobs SET state = 'available',"
    " max_attempts = greatest(max_attempts, attempt + 1),"
    " scheduled_at = timezone('UTC', now()), completed_at = NULL, cancelled_at = NULL,"
    " discarded_at = NULL WHERE state = 'discarded'",
    "pg-boss": "UPDATE pgboss.job SET state = 'retry', retry_limit = retry_limit + 1,"
    " completed_on = NULL, start_after = greatest(start_after, now()) WHERE state = 'failed'",
    "procrastinate": "DO $$ BEGIN PERFORM procrastinate_retry_job_v2(id, now(), NULL, NULL,"
    " NULL) FROM procrastinate_jobs WHERE status = 'failed'; END $$",
    # its own function, due now with one more attempt: once per count of attempts, as the
    # preset calls it (it takes one max_attempts for all the ids it is given)
    "graphile-worker": "DO $$ DECLARE n int; BEGIN FOR n IN SELECT DISTINCT attempts"
    " FROM graphile_worker._private_jobs WHERE attempts >= max_attempts LOOP"
    " PERFORM graphile_worker.reschedule_jobs(ARRAY(SELECT id"
    " FROM graphile_worker._private_jobs WHERE attempts >= max_attempts AND attempts = n),"
    " now(), NULL, NULL, n + 1); END LOOP; END $$",
    "good_job": "UPDATE good_jobs SET performed_at = NULL, finished_at = NULL,"
    " scheduled_at = timezone('UTC', now()), error_event = 3,"
    " updated_at = timezone('UTC', now()) WHERE finished_at IS NOT NULL AND error IS NOT NULL",
    # its FailedExecution.retry_all: ready executions made, the failed ones deleted
    "solid_queue": (
        "INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority, created_at)"
        " SELECT j.id, j.queue_name, j.priority, timezone('UTC', now())"
        " FROM solid_queue_jobs j JOIN solid_queue_failed_executions f ON f.job_id = j.id",
        "DELETE FROM solid_queue_failed_executions",
    ),
    "que": "UPDATE que_jobs SET expired_at = NULL, error_count = 0, run_at = now()"
    " WHERE expired_at IS NOT NULL",
}
# The system's own retry of many jobs named by id, where it has one, for the target: the
# ids are sent as one array, as the system's client sends them; nothing but a count comes
# back. pg-boss 10's ``retry(name, ids)`` (its plans.js ``retryJobs``), once per queue
# name the dead jobs are in; River's ``JobRetry`` (its Go client retries one job a call:
# River has no many-ids retry) with the id array its ``*Many`` queries take
# (``id = any(@id::bigint[])``).
RETRY_IDS: dict[str, str] = {
    "pg-boss": "WITH results AS (UPDATE pgboss.job SET state = 'retry',"
    " retry_limit = retry_limit + 1 WHERE name = %(name)s"
    " AND id IN (SELECT unnest(CAST(%(ids)s AS uuid[]))) AND state = 'failed' RETURNING 1)"
    " SELECT count(*) FROM results",
    "river": "WITH job_to_update AS (SELECT id FROM river_job"
    " WHERE id = any(CAST(%(ids)s AS bigint[])) FOR UPDATE),"
    " updated_job AS (UPDATE river_job SET state = 'available', scheduled_at = now(),"
    " max_attempts = CASE WHEN attempt = max_attempts THEN max_attempts + 1"
    " ELSE max_attempts END, finalized_at = NULL FROM job_to_update"
    " WHERE river_job.id = job_to_update.id AND river_job.state != 'running'"
    " AND NOT (river_job.state = 'available' AND river_job.scheduled_at < now())"
    " RETURNING 1) SELECT count(*) FROM updated_job",
}
# The system's jobs grouped as its many-ids retry takes them (pg-boss: by queue name).
RETRY_GROUPS: dict[str, str] = {"pg-boss": "name", "river": "''"}
SHARE = 50.0  # queuebot's jobs/s as a share of the system's own many-ids retry's, at least
JUDGED_FROM = 100_000  # dead jobs: the share is judged from this many


def _shape(sql: str) -> str:
    """A statement as the report groups it: its start, and whether it locks."""
    flat = " ".join(sql.split())
    return flat[:100] + (" ... FOR UPDATE" if flat.endswith("FOR UPDATE") else "")


TRIAGE_LABELS: tuple[Rule, ...] = (
    (("qb_rest",), "one pass: all but completed counted, errors taken"),
    (("RECURSIVE",), "state counts, completed estimated (index walk)"),
    (("GROUP BY",), "state x type counts (GROUP BY)"),
    (("min(",), "oldest pending + stuck"),
    (("LIMIT",), "newest dead jobs' errors (sample)"),
)


# -- triage --------------------------------------------------------------------------------


@dataclass
class TriageRun:
    preset: str
    queue_name: str | None
    triage: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    bare_queue: list[float] = field(default_factory=list)
    bare_dead: list[float] = field(default_factory=list)
    statements: dict[str, list[float]] = field(default_factory=dict)
    other: list[float] = field(default_factory=list)
    load: tuple[str, str] = ("", "")
    said: str = ""
    floor: list[float] = field(default_factory=list)
    floor_shape: str = ""
    indexed: bool = False  # an index finds the dead jobs (shipped, or --dead-index)


async def measure_triage(
    engine: AsyncEngine,
    timer: StatementTimer,
    preset: str,
    queue_name: str | None,
    runs: int,
    now: datetime,
    explain: bool,
    *,
    indexed: bool,
) -> TriageRun:
    config = QueueConfig(preset=preset, queue_name=queue_name)
    estate = Estate(engine=engine, queues={"q": config}, clock=lambda: now)
    profile = estate.profile("q")
    table = COUNT[preset]
    bare_sql = sa.text(f"SELECT count(*) FROM {table}")
    queue_sql = sa.text(f"SELECT count(*) FROM {table} WHERE {QUEUE_WHERE[preset]}")
    # the floor: the one count every triage gives exactly, the dead jobs', bare
    dead_sql = sa.text(f"SELECT count(*) FROM {table} WHERE {DEAD_WHERE[preset]}")

    async def triage() -> Any:
        async with estate.connect() as conn:
            return await profile.triage(conn, now=now, since=None, job_type=None)

    async def bare(sql: sa.TextClause, params: dict[str, Any]) -> float:
        started = time.perf_counter()
        async with engine.connect() as conn:
            (await conn.execute(sql, params)).all()
        return time.perf_counter() - started

    found = await triage()
    # the floor gives the same numbers: estimated, sampled or counted as triage did
    shape = (
        "sampled"
        if found.sampled_rows
        else "estimated"
        if any(s.estimated for s in found.by_status)
        else "exact"
    )
    floor = floor_statements(
        preset,
        one_queue=queue_name is not None,
        shape=shape,
        percent=found.sampled_percent,
        seed=SEED,  # triage's own, for this bench (see ``run``)
    )
    given = {"q": queue_name, "cutoff": profile.stuck_cutoff(now)}

    async def floor_run() -> float:
        started = time.perf_counter()
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SET jit = off")  # as triage's reads run
            for sql in floor.values():
                params = {k: v for k, v in given.items() if f":{k}" in sql}
                (await conn.execute(sa.text(sql), params)).all()
        return time.perf_counter() - started

    for _ in range(WARMUP):
        await triage()
        await bare(bare_sql, {})
        await floor_run()
    out = TriageRun(preset, queue_name, floor_shape=shape, indexed=indexed)
    dead = sum(s.count for s in found.by_status if s.status == DEAD[preset])
    out.said = (
        f"triage says: total={found.total:,}, dead={dead:,}, stuck={found.stuck:,}, "
        f"{len(found.by_signature)} signatures of {found.signatures_of:,} errors, "
        f"{len(found.by_type)} job types; estimated: "
        f"{[s.status for s in found.by_status if s.estimated] or 'none'}"
        + (f" (a sample of {found.sampled_rows:,} jobs)" if found.sampled_rows else "")
    )
    timer.runs.clear()
    before = loadavg()
    for _ in range(runs):
        timer.start_run()
        started = time.perf_counter()
        await triage()
        out.triage.append(time.perf_counter() - started)
        timer.stop()
        out.bare.append(await bare(bare_sql, {}))
        out.floor.append(await floor_run())
        if queue_name is not None:
            out.bare_queue.append(await bare(queue_sql, {"q": queue_name}))
        else:
            out.bare_dead.append(await bare(dead_sql, {}))
    out.load = (before, loadavg())
    by_label: dict[str, list[float]] = defaultdict(lambda: [0.0] * runs)
    for i, run in enumerate(timer.runs):
        for stmt in run:
            by_label[label(stmt.sql, TRIAGE_LABELS)][i] += stmt.seconds
        out.other.append(out.triage[i] - sum(s.seconds for s in run))
    out.statements = dict(by_label)
    if explain:
        seen: set[str] = set()
        for stmt in timer.runs[0]:
            name = label(stmt.sql, TRIAGE_LABELS)
            if name in seen or stmt.sql.lstrip().upper().startswith(("SET ", "SELECT PG_EX")):
                continue
            seen.add(name)
            async with engine.connect() as conn:
                await conn.exec_driver_sql("SET jit = off")
                plan = await conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS) " + stmt.sql, stmt.params or None
                )
                print(f"  EXPLAIN {name}:")
                print("\n".join(f"    {r[0]}" for r in plan.all()))
        for name, sql in floor.items():
            params = {k: v for k, v in given.items() if f":{k}" in sql}
            async with engine.connect() as conn:
                await conn.exec_driver_sql("SET jit = off")
                plan = await conn.execute(sa.text("EXPLAIN (ANALYZE, BUFFERS) " + sql), params)
                print(f"  EXPLAIN floor {name}:")
                print("\n".join(f"    {r[0]}" for r in plan.all()))
    return out


def verdicts(r: TriageRun) -> tuple[float, float, str, str]:
    """Triage / its floor and triage / the bare count (of the queue, on a queue_name run),
    medians of this run, and each target's verdict: the count's applies where an index
    finds the dead jobs (without one, the floor's is the target)."""
    t50 = statistics.median(r.triage)
    count = statistics.median(r.bare_queue or r.bare)
    to_floor, to_count = t50 / statistics.median(r.floor), t50 / count
    floor = "PASS" if to_floor <= FLOOR_TARGET else "FAIL"
    if not r.indexed:
        return to_floor, to_count, floor, "n/a (no index finds the dead jobs)"
    return to_floor, to_count, floor, "PASS" if to_count <= COUNT_TARGET else "FAIL"


def report_triage(r: TriageRun) -> None:
    t50, t95 = statistics.median(r.triage), percentile(r.triage, 0.95)
    b50, b95 = statistics.median(r.bare), percentile(r.bare, 0.95)
    f50, f95 = statistics.median(r.floor), percentile(r.floor, 0.95)
    scope = f"queue_name={r.queue_name!r}" if r.queue_name else "the whole table"
    print(f"{r.preset} triage, {scope}: {len(r.triage)} runs each; load {r.load[0]} -> {r.load[1]}")
    print(f"  {r.said}")
    print(f"  {'':<40}{'median':>11}{'p95':>12}")
    print(f"  {'triage':<40}{ms(t50):>11}{ms(t95):>12}")
    print(f"  {'the floor (' + r.floor_shape + ', by hand)':<40}{ms(f50):>11}{ms(f95):>12}")
    print(f"  {'bare SELECT count(*) FROM ' + COUNT[r.preset]:<40}{ms(b50):>11}{ms(b95):>12}")
    print(f"  {'ratio triage / floor':<40}{t50 / f50:>10.2f}x{t95 / f95:>11.2f}x")
    print(f"  {'ratio triage / bare':<40}{t50 / b50:>10.2f}x{t95 / b95:>11.2f}x")
    if r.bare_queue:
        q50, q95 = statistics.median(r.bare_queue), percentile(r.bare_queue, 0.95)
        what = f"bare count of queue {r.queue_name!r}"
        print(f"  {what:<40}{ms(q50):>11}{ms(q95):>12}")
        what = "ratio triage / bare count of the queue"
        print(f"  {what:<40}{t50 / q50:>10.2f}x{t95 / q95:>11.2f}x")
    if r.bare_dead:
        d50, d95 = statistics.median(r.bare_dead), percentile(r.bare_dead, 0.95)
        print(f"  {'bare count of the dead jobs':<40}{ms(d50):>11}{ms(d95):>12}")
        print(f"  {'ratio dead count / bare':<40}{d50 / b50:>10.2f}x{d95 / b95:>11.2f}x")
    to_floor, to_count, floor, count = verdicts(r)
    print(f"  target triage / floor <= {FLOOR_TARGET}x: {to_floor:.2f}x {floor}")
    print(f"  target triage / count(*) <= {COUNT_TARGET}x: {to_count:.2f}x {count}")
    print("  triage per statement (median / p95; lanes run at once, so they overlap):")
    for name, times in sorted(r.statements.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"    {name:<52}{ms(statistics.median(times))} {ms(percentile(times, 0.95))}")
    other = statistics.median(r.other)
    print(f"    {'triage wall time minus its statements':<52}{ms(other)}")


def report_summary(results: list[TriageRun]) -> None:
    """Every triage run's verdicts, one line each, with the load around it."""
    print()
    print(f"triage targets: <= {FLOOR_TARGET}x its floor; <= {COUNT_TARGET}x the bare count(*)"
          " (of the queue, on a queue_name run) where an index finds the dead jobs")  # fmt: skip
    for r in results:
        to_floor, to_count, floor, count = verdicts(r)
        scope = f"queue {r.queue_name!r}" if r.queue_name else "whole table"
        index = "dead index" if r.indexed else "no dead index"
        print(
            f"  {r.preset:<16}{scope:<20}{index:<15}floor {to_floor:5.2f}x {floor}   "
            f"count {to_count:5.2f}x {count:<36}load {r.load[0]} -> {r.load[1]}"
        )


async def dead_indexed(
    engine: AsyncEngine,
    timer: StatementTimer,
    libpq: str,
    triaged: list[str],
    args: argparse.Namespace,
    now: datetime,
    results: list[TriageRun],
) -> None:
    """Triage again, each system that ships no index finding its dead jobs given the
    partial index on them `estate indexes` prints (made as psql runs the file, then
    VACUUM ANALYZE)."""
    for preset in triaged:
        estate = Estate(engine=engine, queues={"q": QueueConfig(preset=preset)})
        profile = estate.profile("q")
        async with estate.connect() as conn:
            found = await dead_jobs_index(conn, profile, await profile.tables(conn))
        if found is None:
            continue
        started = time.perf_counter()
        with psycopg.connect(libpq, autocommit=True) as conn:
            for line in statements(found):
                if not line.startswith("--"):
                    conn.execute(line)
            conn.execute(f"VACUUM ANALYZE {found.table}")
            size = conn.execute(  # a partitioned table's: its partitions' own, summed
                "SELECT pg_size_pretty(sum(pg_relation_size(c.oid))) FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE c.relkind = 'i' AND c.relname LIKE %s AND n.nspname = %s",
                (found.name + "%", found.table.split(".")[0]),
            ).fetchone()
        took = time.perf_counter() - started
        print(f"\n{preset}: {found.name} made and the table analysed in {took:.1f} s;"
              f" its size {size[0] if size else '?'}")  # fmt: skip
        for queue_name in (None, ONE_QUEUE[preset]):
            print()
            result = await measure_triage(
                engine, timer, preset, queue_name, args.runs, now, args.explain, indexed=True
            )
            report_triage(result)
            results.append(result)


# -- redrive -------------------------------------------------------------------------------


@dataclass
class RedriveRuns:
    preset: str
    jobs: int
    floor: str = "the bare set-based retry of every dead job (its own SQL)"
    load: tuple[str, str] = ("", "")
    bare: list[float] = field(default_factory=list)
    queuebot: list[float] = field(default_factory=list)
    request: list[float] = field(default_factory=list)
    approve: list[float] = field(default_factory=list)
    statements: dict[str, list[float]] = field(default_factory=dict)


def _seed(table: str) -> str:
    return "bench_seed_" + table.replace(".", "_")


async def keep_seed(engine: AsyncEngine, preset: str) -> None:
    async with engine.begin() as conn:
        for table in TABLES[preset]:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_seed(table)}")
            await conn.exec_driver_sql(f"CREATE TABLE {_seed(table)} AS TABLE {table}")


# The columns an INSERT may write (a generated column is computed: graphile-worker's
# ``is_available``).
_STORED_COLUMNS = (
    "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute"
    " WHERE attrelid = CAST(%s AS regclass) AND attnum > 0 AND NOT attisdropped"
    " AND attgenerated = ''"
)


async def reset(engine: AsyncEngine, preset: str, checkpoint: bool) -> None:
    """The system's tables as the fill left them: the same rows, vacuumed, checkpointed
    (``checkpoint``); and queuebot's log of the queue's redrives emptied (the jobs were
    never redriven). On a connection of its own, without queuebot's bounds: 100,000 rows
    and a CHECKPOINT on a busy host may take longer than they allow."""
    libpq = conninfo(engine.url.render_as_string(hide_password=False))
    await asyncio.to_thread(_reset, libpq, preset, checkpoint)


def _reset(libpq: str, preset: str, checkpoint: bool) -> None:
    tables = TABLES[preset]
    with psycopg.connect(libpq) as conn:
        with conn.transaction():
            conn.execute("DELETE FROM qb_redrive_log WHERE queue = %s", (preset,))
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
            for table in tables:  # the ids as they were, identity columns too
                found = conn.execute(_STORED_COLUMNS, (table,)).fetchone()
                columns = str(found[0]) if found else "*"
                conn.execute(
                    f"INSERT INTO {table} ({columns}) OVERRIDING SYSTEM VALUE"
                    f" SELECT {columns} FROM {_seed(table)}"
                )
        conn.autocommit = True
        for table in tables:
            conn.execute(f"VACUUM (ANALYZE) {table}")
        if checkpoint:
            conn.execute("CHECKPOINT")


async def dead_left(engine: AsyncEngine, preset: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text(f"SELECT count(*) FROM {TABLES[preset][0]} WHERE {DEAD_WHERE[preset]}")
        )
        return int(found.scalar_one())


async def retry_groups(engine: AsyncEngine, preset: str) -> list[tuple[str, list[Any]]]:
    """The dead jobs' ids as the system's many-ids retry takes them: per group (pg-boss:
    per queue name), as the driver sends them (River's as integers)."""
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                f"SELECT {RETRY_GROUPS[preset]}, id::text FROM {TABLES[preset][0]}"
                f" WHERE {DEAD_WHERE[preset]} ORDER BY 1, id"
            )
        )
        groups: dict[str, list[Any]] = defaultdict(list)
        for group, job in found:
            groups[str(group)].append(int(job) if preset == "river" else str(job))
    return list(groups.items())


def bare_retry(libpq: str, preset: str, groups: list[tuple[str, list[Any]]]) -> tuple[float, int]:
    """The floor, in one transaction on a connection of its own (as the system's client
    runs it: without queuebot's statement timeout): the system's many-ids retry over
    every dead job's id where it has one (a call per group), else its set-based retry of
    its dead jobs. Its time, and how many jobs the many-ids retry changed (0 for the
    others)."""
    done = 0
    with psycopg.connect(libpq) as conn:
        started = time.perf_counter()
        with conn.transaction():
            if preset in RETRY_IDS:
                for name, ids in groups:
                    found = conn.execute(RETRY_IDS[preset], {"name": name, "ids": ids}).fetchone()
                    done += int(found[0]) if found else 0
            else:
                retry = RETRY[preset]
                for statement in (retry,) if isinstance(retry, str) else retry:
                    conn.execute(statement)
        return time.perf_counter() - started, done


async def measure_redrive(
    engine: AsyncEngine,
    timer: StatementTimer,
    libpq: str,
    preset: str,
    repeat: int,
    checkpoint: bool,
) -> RedriveRuns:
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                f"SELECT id::text FROM {TABLES[preset][0]} WHERE {DEAD_WHERE[preset]} ORDER BY id"
            )
        )
        ids = [str(r[0]) for r in found]
    groups = await retry_groups(engine, preset) if preset in RETRY_IDS else []
    await keep_seed(engine, preset)
    changes = wire(engine, {preset: QueueConfig(preset=preset)}, jobs=len(ids)).changes
    out = RedriveRuns(preset, len(ids))
    if preset == "pg-boss":
        out.floor = f"pg-boss's retry(name, ids), once per queue name ({len(groups)})"
    elif preset == "river":
        out.floor = "River's JobRetry over every dead job's id (id = any(ids))"
    timer.runs.clear()
    before = loadavg()
    for _ in range(repeat):
        await reset(engine, preset, checkpoint)
        took, done = await asyncio.to_thread(bare_retry, libpq, preset, groups)
        out.bare.append(took)
        assert await dead_left(engine, preset) == 0, f"{preset}: the bare retry left dead jobs"
        assert preset not in RETRY_IDS or done == len(ids), f"{preset}: retried {done}"
        await reset(engine, preset, checkpoint)
        timer.start_run()
        redriven = await redrive(changes, preset, ids)
        timer.stop()
        changed = redriven.changed
        assert changed == len(ids), f"{preset}: queuebot changed {changed} of {len(ids)}"
        assert await dead_left(engine, preset) == 0, f"{preset}: queuebot left dead jobs"
        out.queuebot.append(redriven.seconds)
        out.request.append(redriven.request_s)
        out.approve.append(redriven.approve_s)
    out.load = (before, loadavg())
    by_shape: dict[str, list[float]] = defaultdict(lambda: [0.0] * repeat)
    for i, run in enumerate(timer.runs):
        for stmt in run:
            by_shape[_shape(stmt.sql)][i] += stmt.seconds
    out.statements = dict(by_shape)
    return out


def report_redrive(r: RedriveRuns) -> None:
    bare, qb = statistics.median(r.bare), statistics.median(r.queuebot)
    print(
        f"{r.preset}: {r.jobs:,} dead jobs, {len(r.bare)} runs each; "
        f"load {r.load[0]} -> {r.load[1]}"
    )
    print(f"  the floor: {r.floor}")
    print("  bare retry runs:     " + " / ".join(f"{s * 1000:.0f}" for s in r.bare) + " ms")
    print("  queuebot runs:       " + " / ".join(f"{s * 1000:.0f}" for s in r.queuebot) + " ms")
    print(
        f"  medians: bare {bare * 1000:.0f} ms; queuebot {qb * 1000:.0f} ms (request "
        f"{statistics.median(r.request) * 1000:.0f}, approve "
        f"{statistics.median(r.approve) * 1000:.0f}), {r.jobs / qb:,.0f} jobs/s"
    )
    print(f"  queuebot as a share of the bare retry (bare / queuebot): {100 * bare / qb:.1f}%")
    total = statistics.median(sum(t[i] for t in r.statements.values()) for i in range(len(r.bare)))
    print(
        f"  queuebot's statements {total * 1000:.0f} ms of {qb * 1000:.0f} ms (the rest is "
        "Python, pool checkouts and commits); the slowest, median per run:"
    )
    ranked = sorted(r.statements.items(), key=lambda kv: -statistics.median(kv[1]))
    for shape, times in ranked[:8]:
        print(f"    {ms(statistics.median(times))}  {shape}")


def judge_redrive(r: RedriveRuns, asked: int) -> list[tuple[str, bool]]:
    """The target where the system has a many-ids retry, from ``JUDGED_FROM`` dead jobs
    asked for (``--jobs``; a fill may leave a few of them in another state)."""
    if r.preset not in RETRY_IDS:
        return []
    share = 100 * statistics.median(r.bare) / statistics.median(r.queuebot)
    if asked < JUDGED_FROM:
        print(f"  (the {SHARE:.0f}% target is judged from {JUDGED_FROM:,} dead jobs)")
        return []
    what = f"{r.preset}, {r.jobs:,} dead jobs: queuebot at {share:.1f}% of the system's own"
    return [(f"{what} many-ids retry's jobs/s (target >= {SHARE:.0f}%)", share >= SHARE)]


# -- main ----------------------------------------------------------------------------------


async def run(url: str, libpq: str, args: argparse.Namespace) -> list[tuple[str, bool]]:
    checks: list[tuple[str, bool]] = []  # the redrive's targets
    triaged = [p for p in TRIAGED if p in args.presets]
    redriven = [p for p in SYSTEMS if p in args.presets]
    engine = create_engine(url)
    timer = StatementTimer()
    timer.attach(engine)
    try:
        started = time.perf_counter()
        await upgrade(engine)
        await asyncio.to_thread(make_schemas, libpq, list(args.presets))
        print(f"schemas made in {time.perf_counter() - started:.1f} s")
        if args.only in (None, "triage") and triaged:
            # a triage that samples reads the pages of one seed here, so that its floor
            # can read the same sample
            estimate.seed = lambda: SEED
            results: list[TriageRun] = []
            now = datetime.now(UTC)
            started = time.perf_counter()
            lanes = asyncio.Semaphore(FILLS_AT_ONCE)  # the fills share the cores

            async def fill_one(preset: str) -> None:
                async with lanes:
                    dead = args.rows * 6 // 1000
                    await asyncio.to_thread(fill, libpq, preset, args.rows, dead, now)

            await asyncio.gather(*(fill_one(p) for p in triaged))
            print(f"{args.rows:,} rows each in {', '.join(triaged)}: "
                  f"{time.perf_counter() - started:.1f} s")  # fmt: skip
            for preset in triaged:
                for queue_name in (None, ONE_QUEUE[preset]):
                    print()
                    result = await measure_triage(
                        engine,
                        timer,
                        preset,
                        queue_name,
                        args.runs,
                        now,
                        args.explain,
                        indexed=preset in DEAD_INDEXED,
                    )
                    report_triage(result)
                    results.append(result)
            if args.dead_index:
                await dead_indexed(engine, timer, libpq, triaged, args, now, results)
            report_summary(results)
        if args.only in (None, "redrive") and redriven:
            print()
            print(f"redrive: {args.jobs:,} dead jobs in {args.redrive_rows:,} rows per preset; "
                  f"load {loadavg()}")  # fmt: skip
            for preset in redriven:
                await asyncio.to_thread(
                    fill, libpq, preset, args.redrive_rows, args.jobs, datetime.now(UTC)
                )
                runs = await measure_redrive(
                    engine, timer, libpq, preset, args.repeat, checkpoint=not args.smoke
                )
                print()
                report_redrive(runs)
                checks += judge_redrive(runs, args.jobs)
            async with engine.connect() as conn:
                assert (await AuditTrail().verify(conn)).ok
    finally:
        await engine.dispose()
    return checks


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--rows", full=1_000_000, smoke=2_000, help="rows of each triage table")
    parser.size("--runs", full=20, smoke=2, help="timed triage runs of each")
    parser.size("--jobs", full=10_000, smoke=20, help="dead jobs a redrive takes")
    parser.size("--redrive-rows", full=100_000, smoke=200, help="rows of its table")
    parser.size("--repeat", full=3, smoke=1, help="alternating redrive runs")
    parser.add_argument("--only", choices=("triage", "redrive"))
    parser.add_argument(
        "--presets",
        type=names,
        default=list(SYSTEMS),
        help="comma-separated: " + ",".join(SYSTEMS),
    )
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) triage's statements"
    )
    parser.add_argument(
        "--dead-index",
        action="store_true",
        help="then triage again with the partial index on dead jobs `estate indexes` prints",
    )
    args = parser.read(argv)
    if unknown := set(args.presets) - set(SYSTEMS):
        parser.error(f"unknown presets: {', '.join(sorted(unknown))}")
    if args.runs < 1 or args.repeat < 1 or not 0 < args.jobs <= args.redrive_rows:
        parser.error("--runs and --repeat at least 1; --jobs between 1 and --redrive-rows")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"load average at start: {loadavg()}  ({os.cpu_count()} CPUs)")
    name, url = create(args.url, DB)  # this run's own: concurrent runs never collide
    libpq = conninfo(url)  # the same database, as libpq and node take it
    try:
        checks = asyncio.run(run(url, libpq, args))
    finally:
        drop(args.url, name)
    print(f"load average at end:   {loadavg()}")
    return judge(checks, args.smoke) if checks else 0


if __name__ == "__main__":
    exit_with(main)
