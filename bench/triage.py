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

    .venv/bin/python bench/triage.py                  # with the recommended indexes
    .venv/bin/python bench/triage.py --no-indexes     # without them
    .venv/bin/python bench/triage.py --compare        # both, in one build
    .venv/bin/python bench/triage.py --keep           # keep the database afterwards
    .venv/bin/python bench/triage.py --reuse --keep   # reuse a kept database

Exit status: 0 when every phase measured with the recommended indexes meets the targets
(phases without indexes are informational), 1 when one misses them or the run fails
(with its traceback), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from scratch_db import unique_name
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from services.config import QueueConfig
from services.db import create_engine, redacted
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.reads.gate import ReadGate
from services.reads.service import QueueReads

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DB_NAME = "qb_bench_triage"
GENERATOR_VERSION = "2"  # bump when the data recipe changes; --reuse then rebuilds
ROWS = 1_000_000
RUNS = 20
WARMUP = 3
TARGET_P95_MS = 250.0
TARGET_RATIO = 1.5
WQ_DUPLICATES = 600  # issues queued twice
WQ_BESIDE_ACTIVE = 200  # issues queued again although a row for them is done/claimed/running
MJ_DUPLICATES = 500  # jobs with a second PENDING message

QUEUES = {
    "clips": QueueConfig(profile="message_job"),
    "workers": QueueConfig(profile="worker_queue"),
}
BARE_TABLE = {"workers": "dev_r_worker_queue", "clips": "queue_messages"}
ESTATE_TABLES = ("dev_r_worker_queue", "queue_messages", "clip_jobs", "job_events", "video_assets")

TENANTS = (
    # demo.TENANTS first, so the heaviest tenants are the familiar ones
    "acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka", "tyrell",
    "cyberdyne", "soylent", "massive-dynamic", "aperture", "black-mesa", "vandelay",
    "pied-piper", "dunder-mifflin", "oscorp", "gringotts", "monarch",
    *(f"tenant-{n:02d}" for n in range(20)),
)  # fmt: skip


# -- deterministic pseudo-randomness ------------------------------------------------------


def rnd(k: int, col: str = "i") -> str:
    """SQL for a uniform [0, 1) value fixed by (row number, stream k): reproducible data."""
    return (
        f"((hashint8extended({col}::bigint, {k}) & 4503599627370495)::float8 / 4503599627370496.0)"
    )


def ts(value: datetime) -> str:
    return f"TIMESTAMPTZ '{value.isoformat()}'"


# -- the worker_queue estate ---------------------------------------------------------------


def worker_queue_sql(n: int, now: datetime) -> list[str]:
    """Rows in time order, as an append-mostly queue table has them: 90 days of history
    (done, failed, cancelled spread through it), then the last 2 hours (3.5% of rows)
    holding the backlog and the rows in flight."""
    now_sql = ts(now)
    head = n - round(n * 0.035)
    main = f"""
INSERT INTO dev_r_worker_queue (
  issue_number, github_issue_number, job_type, status, failure_reason, error_message,
  retry_count, max_retries, queued_at, next_attempt_at, server_node, server_preference,
  claimed_at, started_at, heartbeat_at, analyst_notes)
SELECT issue, issue, job_type, status, reason::worker_failure_reason,
  CASE
    WHEN status = 'cancelled' THEN CASE reason
      WHEN 'stale_duplicate' THEN 'issue already closed before dispatch'
      WHEN 'mutex_collision' THEN 'another worker holds the issue lock'
      ELSE 'duplicate queued row: issue already running' END
    WHEN reason IS NULL THEN NULL
    WHEN reason = 'implementation_error' THEN CASE
      WHEN r4 < 0.4 THEN 'spawn failed exit=1: Invalid job_type continue-issue (issue #'
                         || issue || ')'
      WHEN r4 < 0.7 THEN 'spawn-worker.sh: allowlist miss for repo p' || (i % 40)
                         || '-web (issue #' || issue || ')'
      ELSE 'Traceback (most recent call last): KeyError: ''task_' || i
           || ''' in worker/dispatch.py line ' || (100 + i % 50) END
    WHEN reason = 'timeout' THEN CASE
      WHEN r4 < 0.6 THEN 'ssh spawn timed out after 120s on bms-' || (1 + i % 6)
      ELSE 'max spawn retries hit (3/3)' END
    WHEN reason = 'spawn_oom' THEN 'worker OOM-killed at weight tier ' || (2 + i % 3)
                                   || ' on bms-' || (1 + i % 6)
    WHEN reason = 'spawn_ram' THEN 'only ' || (200 + i % 1800)
                                   || ' MiB free at spawn, need 2048 MiB'
    WHEN reason = 'mutex_collision' THEN CASE
      WHEN r4 < 0.5 THEN 'claim_task returned NULL'
      ELSE 'another worker holds the issue lock (holder pid ' || (1000 + i % 30000) || ')' END
    WHEN reason = 'stale_duplicate' THEN 'issue already closed before dispatch'
    ELSE CASE
      WHEN r4 < 0.5 THEN 'git push rejected for refs/heads/issue-' || issue || ' at 0x'
                         || to_hex((i * 2654435761) % 4294967296)
      ELSE 'HTTP 502 from https://api.github.com/repos/acme/p' || (i % 40) || '/issues/'
           || issue || ' (request ' || md5('r' || i)::uuid || ')' END
  END,
  CASE status WHEN 'failed_permanently' THEN 3 WHEN 'failed' THEN floor(r8 * 3)::int
    WHEN 'done' THEN (r8 < 0.05)::int ELSE 0 END,
  3, queued_at,
  CASE WHEN status = 'failed' THEN queued_at + interval '16 minutes' END,
  CASE WHEN claimed_at IS NOT NULL OR status IN ('failed', 'failed_permanently')
    THEN 'bms-' || (1 + i % 6) END,
  CASE WHEN r9 < 0.05 THEN 'bms-' || (1 + (i / 7) % 6) END,
  claimed_at, started_at, heartbeat_at,
  CASE WHEN r9 > 0.999 THEN 'see INC-' || (i % 5000) || ' before redriving' END
FROM (
  SELECT s.*,
    CASE
      WHEN status IN ('queued', 'claimed', 'running') THEN NULL
      WHEN status = 'cancelled' THEN CASE WHEN r2 < 0.55 THEN 'stale_duplicate'
        WHEN r2 < 0.85 THEN 'mutex_collision' ELSE 'other' END
      WHEN status = 'done' THEN NULL
      WHEN r2 < 0.30 THEN 'implementation_error' WHEN r2 < 0.55 THEN 'timeout'
      WHEN r2 < 0.70 THEN 'spawn_oom' WHEN r2 < 0.80 THEN 'spawn_ram'
      WHEN r2 < 0.88 THEN 'mutex_collision' WHEN r2 < 0.93 THEN 'stale_duplicate'
      ELSE 'other' END AS reason,
    CASE WHEN r3 < 0.40 THEN 'dev-issue' WHEN r3 < 0.62 THEN 'review-pr'
      WHEN r3 < 0.77 THEN 'continue-issue' WHEN r3 < 0.87 THEN 'infra-task'
      WHEN r3 < 0.95 THEN 'review-plan' ELSE 'infra-alert' END AS job_type,
    CASE WHEN status IN ('queued', 'claimed', 'running') THEN 400000 + i
      WHEN r5 < 0.04 THEN NULL ELSE 1 + floor(r6 * 350000)::int END AS issue,
    CASE WHEN status IN ('claimed', 'running') THEN least(t0, claimed_at - interval '1 minute')
      ELSE t0 END AS queued_at,
    CASE WHEN status IN ('done', 'failed', 'failed_permanently')
      THEN claimed_at + interval '20 seconds'
      WHEN status = 'running' THEN claimed_at + interval '30 seconds' END AS started_at,
    CASE status
      WHEN 'done' THEN claimed_at + interval '20 seconds' + r8 * interval '40 minutes'
      WHEN 'running' THEN CASE WHEN r8 < 0.10
        THEN {now_sql} - interval '16 minutes' - r7 * interval '60 minutes'
        ELSE {now_sql} - r7 * interval '60 seconds' END END AS heartbeat_at
  FROM (
    SELECT b.*,
      CASE status
        WHEN 'claimed' THEN CASE WHEN r8 < 0.15
          THEN {now_sql} - interval '20 minutes' - r7 * interval '100 minutes'
          ELSE {now_sql} - r7 * interval '5 minutes' END
        WHEN 'running' THEN {now_sql} - interval '2 minutes' - r7 * interval '60 minutes'
        WHEN 'queued' THEN NULL
        WHEN 'cancelled' THEN NULL
        ELSE least({now_sql}, t0 + r8 * interval '10 minutes') END AS claimed_at
    FROM (
      SELECT a.*,
        CASE WHEN tail THEN CASE WHEN r1 < 0.571 THEN 'queued' WHEN r1 < 0.685 THEN 'claimed'
            WHEN r1 < 0.856 THEN 'running' WHEN r1 < 0.886 THEN 'failed' ELSE 'done' END
          ELSE CASE WHEN r1 < 0.0207 THEN 'cancelled' WHEN r1 < 0.0507 THEN 'failed'
            WHEN r1 < 0.0559 THEN 'failed_permanently' ELSE 'done' END END AS status,
        CASE WHEN tail
          THEN {now_sql} - interval '2 hours'
               + ((i - {head})::float8 / {n - head}) * interval '119 minutes'
          ELSE {now_sql} - interval '90 days' + (i::float8 / {head})
               * (interval '90 days' - interval '2 hours') + r9 * interval '5 minutes'
          END AS t0
      FROM (
        SELECT i, i > {head} AS tail, {rnd(1)} AS r1, {rnd(2)} AS r2, {rnd(3)} AS r3,
          {rnd(4)} AS r4, {rnd(5)} AS r5, {rnd(6)} AS r6, {rnd(7)} AS r7, {rnd(8)} AS r8,
          {rnd(9)} AS r9
        FROM generate_series(1, {n}) AS i
      ) a
    ) b
  ) s
) t
"""
    # The same issue queued twice (what the duplicate query finds), and issues queued again
    # although a row for them is already done or in flight.
    twice = f"""
INSERT INTO dev_r_worker_queue (issue_number, github_issue_number, job_type, status,
  queued_at, server_preference)
SELECT issue_number, github_issue_number, job_type, 'queued', queued_at + interval '4 seconds',
  server_preference
FROM dev_r_worker_queue WHERE status = 'queued' ORDER BY id LIMIT {WQ_DUPLICATES}
"""
    again = f"""
INSERT INTO dev_r_worker_queue (issue_number, github_issue_number, job_type, status, queued_at)
SELECT issue_number, github_issue_number, job_type, 'queued',
  {now_sql} - interval '10 minutes' - (id % 50) * interval '1 minute'
FROM dev_r_worker_queue
WHERE status IN ('done', 'claimed', 'running') AND issue_number IS NOT NULL AND id % 97 = 0
ORDER BY id LIMIT {WQ_BESIDE_ACTIVE}
"""
    return [main, twice, again]


# -- the message_job estate ----------------------------------------------------------------


def message_job_sql(n_messages: int, now: datetime) -> list[str]:
    now_sql = ts(now)
    n = n_messages - MJ_DUPLICATES
    head = n - round(n * 0.045)  # the last 90 minutes: backlog and messages in flight
    tenants = "ARRAY[" + ", ".join(f"'{t}'" for t in TENANTS) + "]"
    plan = f"""
CREATE UNLOGGED TABLE qb_bench_plan AS
SELECT p.*,
  CASE WHEN mstatus = 'PROCESSING' THEN least(t0, claimed_at - interval '1 minute')
    ELSE t0 END AS created_at,
  CASE WHEN mstatus = 'DLQ' THEN CASE
    WHEN r5 < 0.40 THEN 'ffmpeg exited with code 137 while transcoding segment '
                       || (1 + i % 40) || ' of asset ' || asset_id
    WHEN r5 < 0.60 THEN 'S3 GetObject failed: NoSuchKey: s3://clips-prod/' || tenant || '/'
                       || asset_id || '.mp4'
    WHEN r5 < 0.75 THEN 'Invalid media: moov atom not found in ' || asset_id || '.mp4'
    WHEN r5 < 0.85 THEN 'upstream timeout after ' || (30000 + (i % 5) * 1000)
                       || ' ms calling transcoder-' || (1 + i % 12)
    WHEN r5 < 0.93 THEN 'ffmpeg exited with code 1: Error while decoding stream #0:'
                       || (i % 3) || ': Invalid data found when processing input'
    ELSE 'webhook delivery to https://hooks.' || tenant || '.example/clips/' || i
         || ' failed: HTTP 503 after 3 retries' END END AS error
FROM (
  SELECT q.*,
    md5('j' || i)::uuid AS job_id, md5('a' || i)::uuid AS asset_id,
    ({tenants})[1 + floor({len(TENANTS)} * r3 * r3)::int] AS tenant,
    CASE mstatus
      WHEN 'COMPLETED' THEN CASE WHEN r2 < 0.006 THEN 'CANCELLED' ELSE 'SUCCEEDED' END
      WHEN 'DLQ' THEN 'FAILED' WHEN 'PENDING' THEN 'QUEUED'
      ELSE CASE WHEN r2 < 0.05 THEN 'CANCEL_REQUESTED' ELSE 'RUNNING' END END AS jstatus,
    CASE WHEN mstatus = 'PROCESSING' THEN CASE WHEN r7 < 0.10
      THEN {now_sql} - interval '20 minutes' - r8 * interval '100 minutes'
      ELSE {now_sql} - r8 * interval '5 minutes' END END AS claimed_at
  FROM (
    SELECT i, r1, r2, r3, r4, r5, r6, r7, r8,
      CASE WHEN tail THEN CASE WHEN r1 < 0.667 THEN 'PENDING' WHEN r1 < 0.889 THEN 'PROCESSING'
          ELSE 'COMPLETED' END
        WHEN r1 < 0.0314 THEN 'DLQ' ELSE 'COMPLETED' END AS mstatus,
      CASE WHEN tail
        THEN {now_sql} - interval '90 minutes'
             + ((i - {head})::float8 / {n - head}) * interval '89 minutes'
        ELSE {now_sql} - interval '60 days' + (i::float8 / {head})
             * (interval '60 days' - interval '90 minutes') + r4 * interval '5 minutes'
        END AS t0
    FROM (
      SELECT i, i > {head} AS tail, {rnd(11)} AS r1, {rnd(12)} AS r2, {rnd(13)} AS r3,
        {rnd(14)} AS r4, {rnd(15)} AS r5, {rnd(16)} AS r6, {rnd(17)} AS r7, {rnd(18)} AS r8
      FROM generate_series(1, {n}) AS i
    ) r
  ) q
) p
"""
    assets = """
INSERT INTO video_assets (id, tenant_id, source_object_key, status, created_at)
SELECT asset_id, tenant, 'uploads/' || tenant || '/' || asset_id || '.mp4',
  CASE WHEN error LIKE 'S3 GetObject failed%' THEN 'DELETED' ELSE 'READY' END, created_at
FROM qb_bench_plan
"""
    jobs = """
INSERT INTO clip_jobs (id, asset_id, tenant_id, status, attempt_count, progress_percent,
  error_message, created_at, started_at, finished_at)
SELECT job_id, asset_id, tenant, jstatus,
  CASE mstatus WHEN 'DLQ' THEN 3 WHEN 'PENDING' THEN 0 ELSE 1 END,
  CASE jstatus WHEN 'SUCCEEDED' THEN 100 WHEN 'FAILED' THEN 20 WHEN 'QUEUED' THEN 0
    WHEN 'CANCELLED' THEN 0 ELSE floor(r6 * 100)::int END,
  error, created_at,
  CASE WHEN mstatus = 'PROCESSING' THEN claimed_at
    WHEN jstatus IN ('SUCCEEDED', 'FAILED') THEN created_at + interval '1 minute' END,
  CASE jstatus WHEN 'SUCCEEDED' THEN created_at + interval '3 minutes' + r6 * interval '6 minutes'
    WHEN 'FAILED' THEN created_at + interval '9 minutes'
    WHEN 'CANCELLED' THEN created_at + interval '2 minutes' END
FROM qb_bench_plan
"""
    messages = """
INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, claimed_at,
  last_error)
SELECT md5('m' || i)::uuid, job_id, mstatus,
  CASE mstatus WHEN 'DLQ' THEN 3 WHEN 'PENDING' THEN 0
    WHEN 'COMPLETED' THEN 1 + (r7 < 0.03)::int ELSE 1 END,
  CASE WHEN mstatus = 'DLQ' THEN created_at + interval '6 minutes' ELSE created_at END,
  CASE mstatus WHEN 'COMPLETED' THEN created_at + interval '20 seconds'
    WHEN 'DLQ' THEN created_at + interval '9 minutes'
    WHEN 'PROCESSING' THEN claimed_at END,
  CASE WHEN mstatus = 'DLQ' THEN error
    WHEN mstatus = 'COMPLETED' AND r7 < 0.03
    THEN 'upstream timeout after 30000 ms calling transcoder-' || (1 + i % 12) END
FROM qb_bench_plan
"""
    duplicates = f"""
INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at)
SELECT md5('d' || id)::uuid, job_id, 'PENDING', 0, available_at + interval '4 seconds'
FROM queue_messages WHERE status = 'PENDING' ORDER BY id LIMIT {MJ_DUPLICATES}
"""
    # A QUEUED event for every fourth job; the full story for dead and running jobs.
    events = """
INSERT INTO job_events (id, aggregate_id, event_type, message, created_at)
SELECT md5('e' || i || ':' || k)::uuid, job_id, e.event_type,
  COALESCE(e.message, error), created_at + e.after
FROM qb_bench_plan
CROSS JOIN LATERAL (VALUES
  (0, 'QUEUED', 'Clip job accepted', interval '0'),
  (1, 'CLAIMED', 'Worker claimed message (attempt 1)', interval '1 minute'),
  (2, 'RETRY', NULL, interval '3 minutes'),
  (3, 'CLAIMED', 'Worker claimed message (attempt 2)', interval '4 minutes'),
  (4, 'RETRY', NULL, interval '6 minutes'),
  (5, 'CLAIMED', 'Worker claimed message (attempt 3)', interval '7 minutes'),
  (6, 'FAILED', NULL, interval '9 minutes'),
  (7, 'DLQ', 'Message moved to DLQ after 3 attempts', interval '9 minutes')
) AS e (k, event_type, message, after)
WHERE (k = 0 AND (i % 4 = 0 OR mstatus <> 'COMPLETED'))
   OR (mstatus = 'DLQ' AND k > 0)
   OR (mstatus = 'PROCESSING' AND k = 1)
"""
    return [plan, assets, jobs, messages, duplicates, events, "DROP TABLE qb_bench_plan"]


# -- database lifecycle ----------------------------------------------------------------------


def database_name(*, keep: bool, reuse: bool, rows: int = ROWS) -> str:
    """The named estate ``qb_bench_triage`` when the run keeps or reuses it (on purpose:
    it takes a minute to build, and bench/slack_ack.py serves it too), named for its size
    when that is not the default (``qb_bench_triage_10000000``: ten minutes to build, so
    kept beside the 1,000,000-row one, not in its place); otherwise a name of this run's
    own, so two runs at once never drop each other's database."""
    kept = DB_NAME if rows == ROWS else f"{DB_NAME}_{rows}"
    return kept if keep or reuse else unique_name(DB_NAME)


def bench_url(admin: URL, name: str) -> URL:
    return admin.set(drivername="postgresql+psycopg", database=name)


async def database_exists(admin: AsyncEngine, name: str) -> bool:
    async with admin.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
        )
        return found.first() is not None


async def drop_database(admin: AsyncEngine, name: str) -> None:
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def create_database(admin: AsyncEngine, name: str) -> None:
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')


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


async def load_profile(engine: AsyncEngine, profile: str, statements: Sequence[str]) -> float:
    """Create a profile's tables from the shipped DDL and fill them (``engine`` must not
    pool: the session settings below must not outlive the load)."""
    started = time.perf_counter()
    async with engine.connect() as conn:
        try:  # the data is consistent by construction: skip per-row FK checks (superuser)
            await conn.exec_driver_sql("SET session_replication_role = replica")
        except sa.exc.DBAPIError:
            await conn.rollback()
        await conn.exec_driver_sql("SET synchronous_commit = off")
        await create_estate_tables(conn, profile)
        for sql in statements:
            # SQLAlchemy hands psycopg an (empty) parameter list, so a literal % is %%
            await conn.exec_driver_sql(sql.replace("%", "%%"))
        await conn.commit()
    return time.perf_counter() - started


async def build(engine: AsyncEngine, rows: int, now: datetime) -> None:
    print(f"building {rows:,}-row estates of both profiles (server-side generate_series) ...")
    started = time.perf_counter()
    wq_rows = rows - WQ_DUPLICATES - WQ_BESIDE_ACTIVE
    wq, mj = await asyncio.gather(  # two connections: the two builds share the 2 cores
        load_profile(engine, "worker_queue", worker_queue_sql(wq_rows, now)),
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


# -- measurement ---------------------------------------------------------------------------


@dataclass
class Statement:
    sql: str
    params: Any
    seconds: float


@dataclass
class StatementTimer:
    """Times every cursor execution on the engine while ``active`` (SQLAlchemy events)."""

    active: bool = False
    runs: list[list[Statement]] = field(default_factory=list)

    def attach(self, engine: AsyncEngine) -> None:
        event.listen(engine.sync_engine, "before_cursor_execute", self._before)
        event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    def start_run(self) -> None:
        self.active = True
        self.runs.append([])

    def stop(self) -> None:
        self.active = False

    def _before(self, conn: Any, _cursor: Any, *_args: Any) -> None:
        conn.info.setdefault("qb_bench_t0", []).append(time.perf_counter())

    def _after(self, conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        started = conn.info["qb_bench_t0"].pop()
        if self.active:
            self.runs[-1].append(Statement(statement, parameters, time.perf_counter() - started))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def label(sql: str) -> str:
    s = " ".join(sql.split())
    if s.startswith(("SET ", "SELECT pg_export_snapshot")):
        return "snapshot export/import and session settings"
    if "pg_class" in s:
        return "table size estimate (pg_class)"
    if "RECURSIVE" in s:
        what = "job status" if "FROM clip_jobs" in s else "status"
        return f"{what} counts, succeeded estimated (status index walk)"
    if "letters" in s:
        return "dead letters by job status (failed jobs first)"
    if "last_error" in s and "LIMIT" in s:
        return "newest dead letters' errors and tenants (sample)"
    if "error_message" in s and "LIMIT" in s:
        return "newest dead letters' errors (sample)"
    if "EXISTS" in s:
        return "duplicates: issues queued twice, beside an active row"
    if "HAVING" in s:
        return "duplicate groups (GROUP BY ... HAVING count > 1)"
    if "JOIN clip_jobs" in s and "GROUP BY" in s:
        return "dead letters by job status (join)"
    if "FROM clip_jobs" in s and "GROUP BY" in s:
        return "job status counts"
    if "min(" in s:
        return "oldest pending + stuck (index lookups)"
    if "GROUP BY" in s:
        return "status counts"
    return s[:60]


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
            firsts.setdefault(label(stmt.sql), stmt)
        for name, first in firsts.items():
            times = [sum(s.seconds for s in run if label(s.sql) == name) for run in timer.runs]
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


def report(result: Result, indexes: bool) -> list[str]:
    t50, t95 = statistics.median(result.triage), percentile(result.triage, 0.95)
    b50, b95 = statistics.median(result.bare), percentile(result.bare, 0.95)
    profile = QUEUES[result.queue].profile
    verdict = "PASS" if result.ok else "FAIL"
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
    runs: int,
    indexes: bool,
    show_summary: bool,
    explain_all: bool = False,
    rows: int = 1_000_000,
) -> list[Result]:
    results = []
    for queue in ("workers", "clips"):
        result = await measure(engine, estate, timer, queue, runs, indexes)
        result.rows = rows
        print()
        print("\n".join(report(result, indexes)))
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
            for name, times, stmt in ranked if explain_all else ranked[:1]:
                if stmt.sql.lstrip().upper().startswith(("SET ", "SELECT PG_EXPORT")):
                    continue
                print(f"  statement: {name} (median {statistics.median(times) * 1000:.1f} ms)")
                print("    " + " ".join(stmt.sql.split())[:800])
                print(f"    params: {stmt.params}")
                print(await explain(engine, stmt))
        results.append(result)
    return results


# -- main ----------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> int:
    admin_url = make_url(args.url).set(drivername="postgresql+psycopg")
    name = database_name(keep=args.keep, reuse=args.reuse, rows=args.rows)
    url = bench_url(admin_url, name)
    admin = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    task = asyncio.current_task()
    if task is not None:  # SIGTERM cancels like Ctrl-C does, so the cleanup below runs
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    engine: AsyncEngine | None = None
    maint: AsyncEngine | None = None
    started = time.perf_counter()
    results: list[Result] = []
    try:
        reuse = False
        if await database_exists(admin, name):
            if args.reuse:
                meta = await read_meta(url)
                reuse = meta.get("version") == GENERATOR_VERSION and meta.get("rows") == str(
                    args.rows
                )
                if not reuse:
                    print(f"{name} exists but does not hold this build; rebuilding it")
            if not reuse:
                await drop_database(admin, name)
        if not reuse:
            await create_database(admin, name)
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
            results += await run_phase(
                engine, estate, timer, args.runs, indexes, first, args.explain_all, args.rows
            )
            first = False

        print()
        print("summary (triage p95 vs target; ratio = triage p95 / bare p95):")
        for r in results:
            t95, b95 = percentile(r.triage, 0.95), percentile(r.bare, 0.95)
            print(
                f"  {QUEUES[r.queue].profile:<13} {'indexes' if r.indexes else 'no indexes':<11}"
                f" triage p95 {t95 * 1000:7.1f} ms  bare p95 {b95 * 1000:7.1f} ms"
                f"  ratio {t95 / b95:5.2f}x  {'PASS' if r.ok else 'FAIL'}"
            )
    finally:
        for each in (engine, maint):
            if each is not None:
                await each.dispose()
        if args.keep:
            print(f"kept {name} (reuse it with --reuse --keep)")
        else:
            await drop_database(admin, name)
            print(f"dropped {name}")
        await admin.dispose()
        print(f"total runtime {time.perf_counter() - started:.1f}s")
    indexed = [r for r in results if r.indexes]
    return 0 if all(r.ok for r in indexed) else 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"admin URL (default {DEFAULT_URL})")
    parser.add_argument("--runs", type=int, default=RUNS, help="timed runs per query")
    parser.add_argument("--rows", type=int, default=ROWS, help="rows per estate")
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
    return parser.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse_args())))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted", file=sys.stderr)
        sys.exit(130)
