"""The triage estates, one of each profile, filled server-side: ``INSERT ... SELECT ...
FROM generate_series`` with deterministic pseudo-random values (``hashint8extended``), so
every build is the same. Rows are in time order, as an append-mostly queue table has
them: months of history, then a short recent tail holding the backlog and the rows in
flight.

* worker_queue (``dev_r_worker_queue``): ~90% done, a few % failed with varied error
  texts (ids, numbers, URLs, so signatures matter), queued backlog, claimed and running
  rows of which some are stuck, issues queued twice and beside an active row;
* message_job (``queue_messages`` over ``clip_jobs``, ``video_assets`` and
  ``job_events``): ~93% COMPLETED, 3% DLQ in six error families, PENDING backlog,
  PROCESSING messages of which some are stuck, jobs with a second PENDING message.

``bench.triage`` measures triage on both; ``bench.housekeep`` and ``bench.metrics`` read
the worker_queue one; ``bench.preset_tables`` fills the queue systems' tables with the
same pseudo-randomness.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from services.config import QueueConfig
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes

WQ_DUPLICATES = 600  # issues queued twice
WQ_BESIDE_ACTIVE = 200  # issues queued again although a row for them is done/claimed/running
MJ_DUPLICATES = 500  # jobs with a second PENDING message

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


def worker_queue_estate(rows: int, now: datetime) -> list[str]:
    """The worker_queue estate of ``rows`` rows in all, its duplicates among them."""
    return worker_queue_sql(rows - WQ_DUPLICATES - WQ_BESIDE_ACTIVE, now)


async def load_profile(engine: AsyncEngine, profile: str, statements: Sequence[str]) -> float:
    """Create a profile's tables from the shipped DDL and fill them (``engine`` must not
    pool: the session settings below must not outlive the load)."""
    started = time.perf_counter()
    async with engine.connect() as conn:
        try:  # the data is consistent by construction: skip per-row FK checks (superuser)
            await conn.exec_driver_sql("SET session_replication_role = replica")
        except DBAPIError:
            await conn.rollback()
        await conn.exec_driver_sql("SET synchronous_commit = off")
        await create_estate_tables(conn, profile)
        for sql in statements:
            # SQLAlchemy hands psycopg an (empty) parameter list, so a literal % is %%
            await conn.exec_driver_sql(sql.replace("%", "%%"))
        await conn.commit()
    return time.perf_counter() - started


async def build_worker_queue(url: str, rows: int, now: datetime) -> float:
    """The worker_queue estate of ``rows`` rows in the database at ``url`` (an engine
    URL), its recommended indexes as ``queuebot estate indexes --print`` ships them, VACUUM
    ANALYZE: the seconds it took."""
    started = time.perf_counter()
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        await load_profile(engine, "worker_queue", worker_queue_estate(rows, now))
        estate = Estate(engine=engine, queues={"workers": QueueConfig(profile="worker_queue")})
        auto = engine.execution_options(isolation_level="AUTOCOMMIT")
        async with auto.connect() as conn:
            for sql in recommended_indexes(estate.profile("workers"), "postgresql"):
                await conn.exec_driver_sql(sql)
            await conn.exec_driver_sql("VACUUM (ANALYZE) dev_r_worker_queue")
    finally:
        await engine.dispose()
    return time.perf_counter() - started
