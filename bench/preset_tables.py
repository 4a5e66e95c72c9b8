"""The job tables of River, pg-boss, Oban, Procrastinate, graphile-worker, GoodJob, Solid
Queue and Que for ``bench.presets``, filled server-side (not a bench of its own).

Each system's schema is made as the preset tests make it (testkit/systems/): River's,
Oban's, GoodJob's, Solid Queue's and Que's tables from the facts of their migrations,
Procrastinate's by its own package (``SchemaManager.get_schema()``), pg-boss 10's by
pg-boss itself (``boss.start()`` and ``createQueue`` in node,
``testkit/systems/pgboss/boss.js``: one partition of ``pgboss.job`` per queue, with its
indexes), graphile-worker 0.17's by graphile-worker itself (``runMigrations`` in node,
``testkit/systems/graphile/worker.js``).

``fill`` writes ``rows`` jobs with ``INSERT ... SELECT ... FROM generate_series`` and
deterministic pseudo-random values (``hashint8extended``, as ``bench.kit.estate``), in time order
as an append-mostly queue table has them: days of history (almost all completed, a few
cancelled), then a recent tail (the last 2 hours) holding the waiting jobs, the jobs
running now (a tenth of them stuck) and the system's own retries. Exactly ``dead`` of
them, spread evenly through the table and none in the last 2 hours, are in the system's
dead state, with error texts of about 40 shapes (each carrying ids, numbers, URLs or
hashes, so signatures matter), kept where the system keeps them. Several queues and job
types, skewed.

How each of the four systems without a state column fills its table, and why:

- GoodJob keeps a finished job (its default), so its table is River's mix: history
  succeeded (the few cancelled ones too: GoodJob has no cancel), a tail queued (some
  scheduled ahead), retried (an error, waiting for Active Job's retry), running (locked
  by a process) and succeeded. Each run is a row of ``good_job_executions`` with its
  error: one per succeeded job (two for 5%, the first failed), 3 or 5 per dead one.
  Errors are "Class: message", the Active Job payload about 400 bytes of jsonb.
- Solid Queue keeps a finished job in ``solid_queue_jobs`` too (its default): history
  finished; the tail's unfinished jobs each have the row of their state's execution
  table (ready, scheduled, claimed, blocked); each dead job a failed execution whose
  ``error`` is the JSON text Solid Queue writes (``exception_class``, ``message``,
  ``backtrace``). Active Job's retry is a new job row, so no job waits to be retried
  in place; a dead job's ``executions`` counts its earlier rows' runs.
- graphile-worker and Que delete a job when it succeeds, so their tables hold no
  succeeded jobs: a table of this size is a backlog (``_backlog``). Besides the dead
  ones: 55% waiting and runnable (enqueued in the last 6 hours: the workers are
  behind), 38% scheduled up to 30 days ahead, about 7% failed and waiting for the
  system's retry (graphile-worker: ``last_error``, its ``exp(attempts)`` seconds run
  ahead; Que: ``error_count``, ``last_error_message`` and its backtrace,
  ``error_count^4 + 3`` seconds ahead), and 0.05% of the jobs outside a named queue
  locked by a worker (graphile-worker: a named queue runs one job at a time; Que holds
  a running job by an advisory lock, not in its table, so there they wait). A
  graphile-worker job dies at ``max_attempts`` (25, or 10 or 5 for a tenth each), 40%
  of its jobs are in no named queue (its default); a Que job dies on its 16th failure
  (``maximum_retry_count`` 15) with the 15th's message.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from bench.kit.estate import rnd, ts

RIVER_QUEUES = ("default", "email", "reports", "webhooks", "media")
RIVER_KINDS = (
    "sync_account", "recompute_stats", "send_email", "send_digest", "render_report",
    "export_csv", "deliver_webhook", "replay_webhook", "transcode_video", "resize_image",
)  # fmt: skip
PGBOSS_QUEUES = ("email-send", "report-render", "webhook-deliver", "image-resize", "account-sync")
OBAN_WORKERS = (
    "Shop.Workers.SyncAccount", "Shop.Workers.RecomputeStats", "Shop.Workers.SendEmail",
    "Shop.Workers.SendDigest", "Shop.Workers.RenderReport", "Shop.Workers.ExportCsv",
    "Shop.Workers.DeliverWebhook", "Shop.Workers.ReplayWebhook", "Shop.Workers.Transcode",
    "Shop.Workers.ResizeImage",
)  # fmt: skip
PROCRASTINATE_TASKS = (
    "shop.tasks.sync_account", "shop.tasks.recompute_stats", "shop.tasks.send_email",
    "shop.tasks.send_digest", "shop.tasks.render_report", "shop.tasks.export_csv",
    "shop.tasks.deliver_webhook", "shop.tasks.replay_webhook", "shop.tasks.transcode",
    "shop.tasks.resize_image",
)  # fmt: skip
TAIL = 0.03  # the share of rows in the last 2 hours


def _array(values: tuple[str, ...]) -> str:
    return "ARRAY[" + ", ".join(f"'{v}'" for v in values) + "]"


def _base(rows: int, dead: int, now: datetime, dead_state: str, tail_states: str) -> str:
    """The rows' skeleton: ``i``, ``r1..r9``, ``tail``, queue index ``qi``, type index ``ki``
    (two types per queue, 70/30), ``t0`` (enqueued) and ``state``; ``dead`` rows of the
    history dead (evenly spread, none in the last 2 hours: a redrive waits until the
    dead jobs stop growing), the tail's states from ``tail_states`` (a CASE over ``r3``),
    the history ``completed`` but for 0.4% ``cancelled`` (Procrastinate's fill: succeeded)."""
    head = rows - round(rows * TAIL)
    step = max(1, head // dead) if dead else rows + 1
    now_sql = ts(now)
    return f"""
SELECT a.*,
  CASE WHEN i % {step} = 0 AND i / {step} <= {dead} AND i <= {head} THEN '{dead_state}'
    WHEN tail THEN {tail_states}
    WHEN r3 < 0.004 THEN 'cancelled' ELSE 'completed' END AS state,
  CASE WHEN tail
    THEN {now_sql} - interval '2 hours' + ((i - {head})::float8 / {rows - head + 1})
         * interval '119 minutes'
    ELSE {now_sql} - interval '30 days' + (i::float8 / {head})
         * (interval '30 days' - interval '2 hours') + r9 * interval '5 minutes'
  END AS t0
FROM (
  SELECT i, i > {head} AS tail,
    CASE WHEN {rnd(21)} < 0.40 THEN 0 WHEN {rnd(21)} < 0.65 THEN 1
      WHEN {rnd(21)} < 0.80 THEN 2 WHEN {rnd(21)} < 0.92 THEN 3 ELSE 4 END AS qi,
    ({rnd(22)} >= 0.7)::int AS ki,
    {rnd(23)} AS r3, {rnd(24)} AS r4, {rnd(25)} AS r5, {rnd(26)} AS r6, {rnd(27)} AS r7,
    {rnd(28)} AS r8, {rnd(29)} AS r9
  FROM generate_series(1, {rows}) AS i
) a
"""


def _error(kind: str) -> str:
    """An error text of about 40 shapes (12 templates, some per job type)."""
    return f"""CASE floor(r6 * 12)::int
  WHEN 0 THEN {kind} || ': dial tcp 10.0.' || (i % 8) || '.' || (i % 250)
              || ':5432: connect: connection refused'
  WHEN 1 THEN {kind} || ': context deadline exceeded after ' || (5 + i % 25) || 's'
  WHEN 2 THEN 'POST https://hooks.acct' || (i % 5000) || '.example.com/jobs/' || i
              || ': 503 Service Unavailable'
  WHEN 3 THEN 'smtp: 421 4.7.0 Try again later, closing connection (' || md5(i::text) || ')'
  WHEN 4 THEN 'duplicate key value violates unique constraint "accounts_pkey" (id='
              || (i % 9000) || ')'
  WHEN 5 THEN 'runtime error: index out of range [' || (i % 7) || '] with length ' || (i % 7)
  WHEN 6 THEN 'NoSuchKey: s3://uploads-prod/' || md5('k' || i)::uuid || '.mp4'
  WHEN 7 THEN 'ffmpeg exited with status ' || (1 + i % 3) || ' on segment ' || (i % 40)
  WHEN 8 THEN {kind} || ': rate limited upstream, retry after ' || (i % 60) || 's'
  WHEN 9 THEN 'cannot unmarshal string into field ' || {kind} || '.account_id of type int64'
  WHEN 10 THEN 'no worker registered for ' || {kind}
  ELSE 'canceling statement due to statement timeout (SQLSTATE 57014)' END"""


def _stuck(now_sql: str) -> str:
    """A running job's start: a tenth of them stuck (20 min to 2 h ago)."""
    return f"""CASE WHEN r8 < 0.10 THEN {now_sql} - interval '20 minutes'
      - r7 * interval '100 minutes' ELSE {now_sql} - r7 * interval '5 minutes' END"""


def river_sql(rows: int, dead: int, now: datetime) -> list[str]:
    now_sql = ts(now)
    tail = """CASE WHEN r3 < 0.45 THEN 'available' WHEN r3 < 0.60 THEN 'scheduled'
      WHEN r3 < 0.68 THEN 'retryable' WHEN r3 < 0.72 THEN 'running'
      WHEN r3 < 0.73 THEN 'pending' ELSE 'completed' END"""
    base = _base(rows, dead, now, "discarded", tail)
    return [
        f"""
INSERT INTO river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at,
  scheduled_at, priority, args, attempted_by, errors, kind, queue)
SELECT state::river_job_state, attempt, max_attempts,
  CASE WHEN state = 'running' THEN {_stuck(now_sql)}
    WHEN attempt > 0 THEN t0 + attempt * interval '30 seconds' END,
  t0,
  CASE WHEN state IN ('completed', 'cancelled', 'discarded')
    THEN t0 + attempt * interval '30 seconds' + r4 * interval '1 minute' END,
  CASE state WHEN 'scheduled' THEN {now_sql} + r4 * interval '1 hour'
    WHEN 'retryable' THEN {now_sql} + r4 * interval '10 minutes' ELSE t0 END,
  CASE WHEN r7 < 0.9 THEN 1 ELSE 2 END,
  jsonb_build_object('id', i, 'account', 'acct_' || (i % 5000)),
  CASE WHEN attempt > 0 THEN ARRAY['worker-' || (1 + i % 8)] END,
  CASE WHEN state IN ('discarded', 'retryable') THEN ARRAY(
    SELECT jsonb_build_object('at', t0 + n * interval '30 seconds', 'attempt', n,
      'error', error, 'trace', 'goroutine ' || (1 + i % 64) || ' [running]:' || chr(10)
      || 'main.(*Worker).Work(...)' || chr(10) || chr(9) || '/app/' || kind || '.go:'
      || (20 + i % 80) || ' +0x1d')
    FROM generate_series(1, attempt) AS n) END,
  kind, queue
FROM (
  SELECT b.*, ({_array(RIVER_QUEUES)})[1 + qi] AS queue,
    ({_array(RIVER_KINDS)})[1 + qi * 2 + ki] AS kind,
    CASE WHEN r4 < 0.7 THEN 3 ELSE 5 END AS max_attempts,
    CASE state WHEN 'discarded' THEN CASE WHEN r4 < 0.7 THEN 3 ELSE 5 END
      WHEN 'retryable' THEN 1 + (r5 < 0.5)::int WHEN 'running' THEN 1
      WHEN 'completed' THEN 1 + (r5 < 0.05)::int WHEN 'cancelled' THEN (r5 < 0.3)::int
      ELSE 0 END AS attempt,
    {_error("(" + _array(RIVER_KINDS) + ")[1 + qi * 2 + ki]")} AS error
  FROM ({base}) b
) c
"""
    ]


def pgboss_sql(rows: int, dead: int, now: datetime) -> list[str]:
    now_sql = ts(now)
    tail = """CASE WHEN r3 < 0.50 THEN 'created' WHEN r3 < 0.58 THEN 'retry'
      WHEN r3 < 0.63 THEN 'active' ELSE 'completed' END"""
    base = _base(rows, dead, now, "failed", tail)
    kind = "(" + _array(PGBOSS_QUEUES) + ")[1 + qi]"
    return [
        f"""
INSERT INTO pgboss.job (id, name, priority, data, state, retry_limit, retry_count,
  retry_delay, retry_backoff, start_after, started_on, created_on, completed_on, keep_until,
  output, policy)
SELECT md5('pgboss' || i)::uuid, c.name, 0,
  jsonb_build_object('id', i, 'account', 'acct_' || (i % 5000)),
  state::pgboss.job_state, q.retry_limit,
  CASE state WHEN 'failed' THEN q.retry_limit WHEN 'retry' THEN 1
    WHEN 'completed' THEN (r5 < 0.05)::int ELSE 0 END,
  q.retry_delay, q.retry_backoff,
  CASE state WHEN 'created' THEN CASE WHEN r4 < 0.2 THEN {now_sql} + r4 * interval '5 hours'
      ELSE t0 END
    WHEN 'retry' THEN {now_sql} + r4 * interval '5 minutes' ELSE t0 END,
  CASE WHEN state = 'active' THEN {_stuck(now_sql)}
    WHEN state IN ('completed', 'failed') THEN t0 + interval '5 seconds' END,
  t0,
  CASE WHEN state IN ('completed', 'failed', 'cancelled')
    THEN t0 + interval '10 seconds' + r4 * interval '1 minute' END,
  t0 + interval '14 days',
  CASE WHEN state = 'failed' THEN jsonb_build_object('name', ename, 'message', error,
      'stack', ename || ': ' || error || chr(10) || '    at Worker.handler (/app/src/workers/'
      || c.name || '.js:' || (10 + i % 90) || ':13)')
    WHEN state = 'completed' AND r5 < 0.5 THEN '{{"sent": true}}'::jsonb END,
  q.policy
FROM (
  SELECT b.*, {kind} AS name,
    CASE floor(r7 * 4)::int WHEN 0 THEN 'Error' WHEN 1 THEN 'TimeoutError'
      WHEN 2 THEN 'FetchError' ELSE 'TypeError' END AS ename,
    {_error(kind)} AS error
  FROM ({base}) b
) c JOIN pgboss.queue q ON q.name = c.name
"""
    ]


def oban_sql(rows: int, dead: int, now: datetime) -> list[str]:
    now_sql = ts(now)
    tail = """CASE WHEN r3 < 0.45 THEN 'available' WHEN r3 < 0.60 THEN 'scheduled'
      WHEN r3 < 0.68 THEN 'retryable' WHEN r3 < 0.72 THEN 'executing' ELSE 'completed' END"""
    base = _base(rows, dead, now, "discarded", tail)
    utc = "timezone('UTC', {})".format
    scheduled = utc(
        f"CASE state WHEN 'scheduled' THEN {now_sql} + r4 * interval '1 hour' "
        f"WHEN 'retryable' THEN {now_sql} + r4 * interval '10 minutes' ELSE t0 END"
    )
    attempted = utc(
        f"CASE WHEN state = 'executing' THEN {_stuck(now_sql)} "
        "WHEN attempt > 0 THEN t0 + attempt * interval '30 seconds' END"
    )
    return [
        f"""
INSERT INTO oban_jobs (state, queue, worker, args, errors, attempt, max_attempts, inserted_at,
  scheduled_at, attempted_at, completed_at, attempted_by, discarded_at, cancelled_at)
SELECT state::oban_job_state, queue, worker,
  jsonb_build_object('id', i, 'account', 'acct_' || (i % 5000)),
  CASE WHEN state IN ('discarded', 'retryable') THEN ARRAY(
    SELECT jsonb_build_object('attempt', n, 'at', t0 + n * interval '30 seconds',
      'error', '** (RuntimeError) ' || error)
    FROM generate_series(1, attempt) AS n) ELSE ARRAY[]::jsonb[] END,
  attempt, max_attempts, {utc("t0")},
  {scheduled},
  {attempted},
  {utc("CASE WHEN state = 'completed' THEN t0 + interval '40 seconds' END")},
  CASE WHEN attempt > 0 THEN ARRAY['web.1', '6f1c1f0e-0b5e-4c1e-9a53-1f2e3d4c5b6a'] END,
  {utc("CASE WHEN state = 'discarded' THEN t0 + attempt * interval '30 seconds' END")},
  {utc("CASE WHEN state = 'cancelled' THEN t0 + interval '1 minute' END")}
FROM (
  SELECT b.*, ({_array(RIVER_QUEUES)})[1 + qi] AS queue,
    ({_array(OBAN_WORKERS)})[1 + qi * 2 + ki] AS worker,
    CASE WHEN r4 < 0.7 THEN 3 ELSE 5 END AS max_attempts,
    CASE state WHEN 'discarded' THEN CASE WHEN r4 < 0.7 THEN 3 ELSE 5 END
      WHEN 'retryable' THEN 1 + (r5 < 0.5)::int WHEN 'executing' THEN 1
      WHEN 'completed' THEN 1 ELSE 0 END AS attempt,
    {_error("(" + _array(OBAN_WORKERS) + ")[1 + qi * 2 + ki]")} AS error
  FROM ({base}) b
) c
"""
    ]


def procrastinate_sql(rows: int, dead: int, now: datetime) -> list[str]:
    """Procrastinate keeps no error text: its jobs, and their events (deferred, started,
    then how the last attempt ended) as its triggers would have written them."""
    tail = """CASE WHEN r3 < 0.55 THEN 'todo' WHEN r3 < 0.60 THEN 'doing'
      ELSE 'completed' END"""
    base = _base(rows, dead, now, "failed", tail)
    jobs = f"""
INSERT INTO procrastinate_jobs (id, queue_name, task_name, priority, args, status,
  scheduled_at, attempts)
SELECT i, ({_array(RIVER_QUEUES)})[1 + qi], ({_array(PROCRASTINATE_TASKS)})[1 + qi * 2 + ki],
  0, jsonb_build_object('id', i, 'account', 'acct_' || (i % 5000)),
  (CASE state WHEN 'completed' THEN 'succeeded' ELSE state END)::procrastinate_job_status,
  NULL, CASE state WHEN 'failed' THEN 3 WHEN 'todo' THEN 0 ELSE 1 END
FROM ({base}) b
"""
    events = f"""
INSERT INTO procrastinate_events (job_id, type, at)
SELECT i, e.type::procrastinate_job_event_type, t0 + e.after * interval '1 second'
FROM ({base}) b
CROSS JOIN LATERAL (VALUES ('deferred', 0, true), ('started', 5, b.state <> 'todo'),
  (CASE b.state WHEN 'completed' THEN 'succeeded' WHEN 'failed' THEN 'failed'
     WHEN 'cancelled' THEN 'cancelled' END, 30,
   b.state IN ('completed', 'failed', 'cancelled'))) AS e(type, after, present)
WHERE e.present
"""
    sequence = (
        "SELECT setval(pg_get_serial_sequence('procrastinate_jobs', 'id'), "
        "(SELECT max(id) FROM procrastinate_jobs))"
    )
    return [jobs, events, sequence]


# -- the four systems without a state column ------------------------------------------------

RAILS_QUEUES = ("default", "mailers", "reports", "webhooks", "media")
RAILS_JOBS = (
    "SyncAccountJob", "RecomputeStatsJob", "SendEmailJob", "SendDigestJob", "RenderReportJob",
    "ExportCsvJob", "DeliverWebhookJob", "ReplayWebhookJob", "TranscodeVideoJob",
    "ResizeImageJob",
)  # fmt: skip
RUBY_ERRORS = ("Net::ReadTimeout", "Faraday::ServerError", "ActiveRecord::RecordNotUnique",
               "RuntimeError")  # fmt: skip


def _ruby_error() -> str:
    """A Ruby exception's class (by ``r7``): Rails systems write "Class: message"."""
    return f"({_array(RUBY_ERRORS)})[1 + floor(r7 * 4)::int]"


def _backtrace(job: str) -> str:
    return (
        f"'/usr/lib/ruby/3.3.0/net/protocol.rb:229:in `rbuf_fill''' || chr(10) || 'app/jobs/'"
        f" || lower({job}) || '.rb:' || (10 + i % 90) || ':in `perform'''"
    )


def _active_job(job: str, queue: str, job_id: str, executions: str, at: str) -> str:
    """The job as Active Job serializes it (GoodJob keeps it as jsonb, Solid Queue as
    text): about 400 bytes."""
    return f"""jsonb_build_object('job_class', {job}, 'job_id', {job_id},
  'provider_job_id', NULL, 'queue_name', {queue}, 'priority', NULL,
  'arguments', jsonb_build_array(jsonb_build_object('account_id', 'acct_' || (i % 5000),
    'id', i, '_aj_symbol_keys', jsonb_build_array('account_id', 'id'))),
  'executions', {executions}, 'exception_executions', CASE WHEN {executions} > 0
    THEN jsonb_build_object('[' || {_ruby_error()} || ']', {executions}) ELSE '{{}}' END,
  'locale', 'en', 'timezone', 'UTC',
  'enqueued_at', to_char({at} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
  'scheduled_at', NULL)"""


def _backlog(rows: int, dead: int, now: datetime, dead_state: str) -> str:
    """The skeleton of a table whose system deletes a job when it succeeds: ``_base``'s
    rows and dead jobs, every other row ``st`` by ``r3``: ``due`` (55%: waiting, runnable,
    enqueued in the last 6 hours: the workers are behind), ``later`` (38%: scheduled
    up to 30 days ahead, enqueued in the last 30 days), ``retrying`` (about 7%: failed,
    waiting for the system's own retry), ``locked`` (0.05% of the jobs outside a named
    queue: a worker runs it)."""
    base = _base(rows, dead, now, dead_state, "'due'")
    return f"""
SELECT b.*, CASE WHEN b.state = '{dead_state}' THEN '{dead_state}' WHEN r3 < 0.55 THEN 'due'
    WHEN r3 < 0.93 THEN 'later' WHEN r3 < 0.9995 OR qi > 0 THEN 'retrying'
    ELSE 'locked' END AS st
FROM ({base}) b
"""


def graphile_sql(rows: int, dead: int, now: datetime) -> list[str]:
    """graphile-worker's private tables, written directly (its ``add_jobs`` takes one
    spec per job); its tasks and named queues are rows of their own tables."""
    now_sql = ts(now)
    kind = f"({_array(RIVER_KINDS)})[1 + qi * 2 + ki]"
    tasks = (
        "INSERT INTO graphile_worker._private_tasks (identifier)"
        f" SELECT unnest({_array(RIVER_KINDS)}) ON CONFLICT (identifier) DO NOTHING"
    )
    queues = (
        "INSERT INTO graphile_worker._private_job_queues (queue_name)"
        f" SELECT unnest({_array(RIVER_QUEUES[1:])}) ON CONFLICT (queue_name) DO NOTHING"
    )
    jobs = f"""
INSERT INTO graphile_worker._private_jobs (id, job_queue_id, task_id, payload, priority,
  run_at, attempts, max_attempts, last_error, created_at, updated_at, locked_at, locked_by)
OVERRIDING SYSTEM VALUE
SELECT i, q.id, t.id, json_build_object('id', i, 'account', 'acct_' || (i % 5000)), 0,
  CASE WHEN st = 'later' THEN {now_sql} + r4 * interval '30 days'
    WHEN failed_at IS NOT NULL
    THEN failed_at + exp(least(attempts, 10)) * interval '1 second' ELSE created END,
  attempts, max_attempts, CASE WHEN failed_at IS NOT NULL THEN error END, created,
  coalesce(failed_at, locked, created), locked,
  CASE WHEN locked IS NOT NULL THEN 'worker-' || left(md5('w' || (i % 8)), 18) END
FROM (
  SELECT d.*,
    CASE st WHEN 'dead' THEN max_attempts WHEN 'locked' THEN 1 + (r5 < 0.1)::int
      WHEN 'retrying' THEN 1 + floor(r5 * (max_attempts - 1))::int ELSE 0 END AS attempts,
    CASE st WHEN 'dead' THEN t0
      WHEN 'retrying' THEN {now_sql} - r5 * interval '6 hours' END AS failed_at,
    CASE st WHEN 'later' THEN t0 WHEN 'dead' THEN t0 - r5 * interval '4 days'
      WHEN 'retrying' THEN {now_sql} - r5 * interval '6 hours' - r4 * interval '4 days'
      ELSE {now_sql} - r4 * interval '6 hours' END AS created,
    CASE WHEN st = 'locked' THEN {_stuck(now_sql)} END AS locked
  FROM (
    SELECT b.*, {kind} AS task,
      CASE WHEN qi > 0 THEN ({_array(RIVER_QUEUES)})[1 + qi] END AS queue,
      CASE WHEN {rnd(30)} < 0.8 THEN 25 WHEN {rnd(30)} < 0.9 THEN 10 ELSE 5 END AS max_attempts,
      'Error: ' || {_error(kind)} AS error
    FROM ({_backlog(rows, dead, now, "dead")}) b
  ) d
) c
JOIN graphile_worker._private_tasks t ON t.identifier = c.task
LEFT JOIN graphile_worker._private_job_queues q ON q.queue_name = c.queue
"""
    sequence = (
        "SELECT setval(pg_get_serial_sequence('graphile_worker._private_jobs', 'id'),"
        " (SELECT max(id) FROM graphile_worker._private_jobs))"
    )
    return [tasks, queues, jobs, sequence]


def que_sql(rows: int, dead: int, now: datetime) -> list[str]:
    """Que 2's rows (``job_schema_version`` 2, keyword arguments). Its locker holds a
    running job by an advisory lock, so the ``locked`` band is waiting here; a job is
    expired after its 16th failure (``maximum_retry_count`` 15), its message the 15th's."""
    now_sql = ts(now)
    job = f"({_array(RAILS_JOBS)})[1 + qi * 2 + ki]"
    jobs = f"""
INSERT INTO que_jobs (id, priority, run_at, job_class, error_count, last_error_message, queue,
  last_error_backtrace, expired_at, args, kwargs, job_schema_version)
SELECT i, 100,
  CASE st WHEN 'later' THEN {now_sql} + r4 * interval '30 days'
    WHEN 'retrying' THEN failed_at + (power(error_count, 4) + 3) * interval '1 second'
    WHEN 'expired' THEN failed_at ELSE {now_sql} - r4 * interval '6 hours' END,
  job, error_count,
  CASE WHEN failed_at IS NOT NULL THEN left({_ruby_error()} || ': ' || error, 500) END,
  queue, CASE WHEN failed_at IS NOT NULL THEN {_backtrace("job")} END,
  CASE WHEN st = 'expired' THEN failed_at END,
  '[]', jsonb_build_object('account_id', 'acct_' || (i % 5000), 'id', i), 2
FROM (
  SELECT b.*, {job} AS job, ({_array(RAILS_QUEUES)})[1 + qi] AS queue,
    {_error(job)} AS error,
    CASE st WHEN 'expired' THEN 16 WHEN 'retrying' THEN 1 + floor(r5 * 15)::int
      ELSE 0 END AS error_count,
    CASE st WHEN 'expired' THEN t0
      WHEN 'retrying' THEN {now_sql} - r5 * interval '6 hours' END AS failed_at
  FROM ({_backlog(rows, dead, now, "expired")}) b
) c
"""
    sequence = (
        "SELECT setval(pg_get_serial_sequence('que_jobs', 'id'), (SELECT max(id) FROM que_jobs))"
    )
    return [jobs, sequence]


def good_job_sql(rows: int, dead: int, now: datetime) -> list[str]:
    """GoodJob's jobs (kept when finished, its default) and one execution row per run.
    Times are UTC without a zone; a job's id is its Active Job id."""
    now_sql = ts(now)
    utc = "timezone('UTC', {})".format
    tail = """CASE WHEN r3 < 0.45 THEN 'queued' WHEN r3 < 0.55 THEN 'retried'
      WHEN r3 < 0.59 THEN 'running' ELSE 'succeeded' END"""
    base = _base(rows, dead, now, "discarded", tail)
    job = f"({_array(RAILS_JOBS)})[1 + qi * 2 + ki]"
    fill = f"""
CREATE TEMP TABLE qb_fill ON COMMIT DROP AS
SELECT c.*, {_active_job("job", "queue", "id::text", "runs", "t0")} AS params,
  CASE st WHEN 'discarded' THEN CASE WHEN r7 < 0.8 THEN 4 ELSE 5 END
    WHEN 'retried' THEN 3 END AS error_event
FROM (
  SELECT b.*, md5('good_job' || i)::uuid AS id, {job} AS job,
    ({_array(RAILS_QUEUES)})[1 + qi] AS queue,
    CASE WHEN b.state IN ('completed', 'cancelled') THEN 'succeeded' ELSE b.state END AS st,
    CASE b.state WHEN 'discarded' THEN CASE WHEN r4 < 0.7 THEN 3 ELSE 5 END
      WHEN 'retried' THEN 1 + (r5 < 0.5)::int WHEN 'running' THEN 1 + (r5 < 0.1)::int
      WHEN 'queued' THEN 0 ELSE 1 + (r5 < 0.05)::int END AS runs,
    CASE WHEN b.state = 'running' THEN {_stuck(now_sql)}
      WHEN b.state IN ('discarded', 'completed', 'cancelled')
      THEN t0 + interval '1 second' END AS performed,
    {_ruby_error()} || ': ' || {_error(job)} AS error,
    'c0ffee00-0000-4000-8000-00000000000' || (i % 8) AS process
  FROM ({base}) b
) c
"""
    jobs = f"""
INSERT INTO good_jobs (id, active_job_id, queue_name, priority, serialized_params,
  scheduled_at, performed_at, finished_at, error, error_event, created_at, updated_at,
  is_discrete, executions_count, job_class, locked_by_id, locked_at)
SELECT id, id, queue, 0, params,
  {utc(f"CASE st WHEN 'queued' THEN CASE WHEN r4 < 0.3 THEN {now_sql} + r4 * interval '1 hour' ELSE t0 END WHEN 'retried' THEN {now_sql} + r4 * interval '10 minutes' ELSE t0 END")},
  {utc("performed")}, {utc("finished")},
  CASE WHEN st IN ('discarded', 'retried') THEN error END, error_event, {utc("t0")},
  {utc("coalesce(finished, performed, t0)")}, true, runs, job,
  CASE WHEN st = 'running' THEN process::uuid END,
  CASE WHEN st = 'running' THEN {utc("performed")} END
FROM (
  SELECT f.*, CASE WHEN st IN ('succeeded', 'discarded')
    THEN performed + (runs - 1) * interval '30 seconds' + r4 * interval '1 minute' END AS finished
  FROM qb_fill f
) g
"""  # noqa: E501
    executions = f"""
INSERT INTO good_job_executions (id, created_at, updated_at, active_job_id, job_class,
  queue_name, serialized_params, scheduled_at, finished_at, error, error_event,
  error_backtrace, process_id, duration)
SELECT md5('good_job_execution' || i || '-' || n)::uuid, {utc("started")},
  {utc("coalesce(ended, started)")}, id, job, queue, params, {utc("started")}, {utc("ended")},
  CASE WHEN failed THEN error END, CASE WHEN failed THEN event END,
  CASE WHEN failed THEN ARRAY['/usr/lib/ruby/3.3.0/net/protocol.rb:229:in `rbuf_fill''',
    'app/jobs/' || lower(job) || '.rb:' || (10 + i % 90) || ':in `perform''']
  END, process::uuid, ended - started
FROM (
  SELECT f.*, n,
    CASE WHEN n = runs AND performed IS NOT NULL THEN performed
      ELSE t0 + (n - 1) * interval '30 seconds' END AS started,
    CASE WHEN n = runs AND st = 'running' THEN NULL
      WHEN n = runs AND performed IS NOT NULL THEN performed + r4 * interval '1 minute'
      ELSE t0 + (n - 1) * interval '30 seconds' + interval '5 seconds' END AS ended,
    n < runs OR st IN ('discarded', 'retried') AS failed,
    CASE WHEN n = runs AND st = 'discarded' THEN error_event ELSE 3 END AS event
  FROM qb_fill f CROSS JOIN LATERAL generate_series(1, f.runs) AS n
) e
"""
    return [fill, jobs, executions]


def solid_queue_sql(rows: int, dead: int, now: datetime) -> list[str]:
    """Solid Queue's jobs (kept when finished, its default) and, for each unfinished one,
    the row of the execution table its state is. Active Job's retry enqueues a new job
    row, so a dead job's ``executions`` counts the runs its earlier rows made. Times are
    UTC without a zone."""
    now_sql = ts(now)
    utc = "timezone('UTC', {})".format
    tail = """CASE WHEN r3 < 0.45 THEN 'ready' WHEN r3 < 0.60 THEN 'scheduled'
      WHEN r3 < 0.64 THEN 'claimed' WHEN r3 < 0.65 THEN 'blocked' ELSE 'finished' END"""
    base = _base(rows, dead, now, "failed", tail)
    job = f"({_array(RAILS_JOBS)})[1 + qi * 2 + ki]"
    expires = f"{now_sql} + interval '3 minutes'"  # a blocked job's concurrency wait
    fill = f"""
CREATE TEMP TABLE qb_fill ON COMMIT DROP AS
SELECT c.*, {_active_job("job", "queue", "active_job_id", "runs", "t0")}::text AS arguments
FROM (
  SELECT b.*, md5('solid_queue' || i)::uuid::text AS active_job_id, {job} AS job,
    ({_array(RAILS_QUEUES)})[1 + qi] AS queue,
    CASE WHEN b.state IN ('completed', 'cancelled') THEN 'finished' ELSE b.state END AS st,
    CASE WHEN b.state = 'failed' THEN CASE WHEN r4 < 0.7 THEN 2 ELSE 4 END
      WHEN b.state IN ('completed', 'cancelled') AND r5 < 0.05 THEN 1 ELSE 0 END AS runs,
    CASE WHEN b.state = 'scheduled' THEN {now_sql} + r4 * interval '1 hour' ELSE t0 END
      AS run_at,
    CASE WHEN b.state = 'blocked' THEN {job} || '/acct_' || (i % 50) END AS concurrency_key,
    {_error(job)} AS error
  FROM ({base}) b
) c
"""
    jobs = f"""
INSERT INTO solid_queue_jobs (id, queue_name, class_name, arguments, priority, active_job_id,
  scheduled_at, finished_at, concurrency_key, created_at, updated_at)
SELECT i, queue, job, arguments, 0, active_job_id, {utc("run_at")}, {utc("finished")},
  concurrency_key, {utc("t0")}, {utc("coalesce(finished, t0)")}
FROM (
  SELECT f.*, CASE WHEN st = 'finished'
    THEN t0 + interval '40 seconds' + r4 * interval '1 minute' END AS finished
  FROM qb_fill f
) g
"""
    executions = [
        "INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority, created_at)"
        f" SELECT i, queue, 0, {utc('t0')} FROM qb_fill WHERE st = 'ready'",
        "INSERT INTO solid_queue_scheduled_executions (job_id, queue_name, priority,"
        f" scheduled_at, created_at) SELECT i, queue, 0, {utc('run_at')}, {utc('t0')}"
        " FROM qb_fill WHERE st = 'scheduled'",
        "INSERT INTO solid_queue_claimed_executions (job_id, process_id, created_at)"
        f" SELECT i, 1 + i % 4, {utc(_stuck(now_sql))} FROM qb_fill WHERE st = 'claimed'",
        "INSERT INTO solid_queue_blocked_executions (job_id, queue_name, priority,"
        " concurrency_key, expires_at, created_at) SELECT i, queue, 0, concurrency_key,"
        f" {utc(expires)}, {utc('t0')}"
        " FROM qb_fill WHERE st = 'blocked'",
        f"""
INSERT INTO solid_queue_failed_executions (job_id, error, created_at)
SELECT i, jsonb_build_object('exception_class', {_ruby_error()}, 'message', error,
    'backtrace', jsonb_build_array('/usr/lib/ruby/3.3.0/net/protocol.rb:229:in `rbuf_fill''',
      'app/jobs/' || lower(job) || '.rb:' || (10 + i % 90) || ':in `perform'''))::text,
  {utc("t0 + interval '1 minute' + r4 * interval '1 minute'")}
FROM qb_fill WHERE st = 'failed'
""",
    ]
    sequence = (
        "SELECT setval(pg_get_serial_sequence('solid_queue_jobs', 'id'),"
        " (SELECT max(id) FROM solid_queue_jobs))"
    )
    return [fill, jobs, *executions, sequence]


FILLS = {
    "river": river_sql,
    "pg-boss": pgboss_sql,
    "oban": oban_sql,
    "procrastinate": procrastinate_sql,
    "graphile-worker": graphile_sql,
    "good_job": good_job_sql,
    "solid_queue": solid_queue_sql,
    "que": que_sql,
}
# Each system's jobs table (and the tables a reset restores with it), and its dead state.
TABLES = {
    "river": ("river_job",),
    "pg-boss": ("pgboss.job",),
    "oban": ("oban_jobs",),
    "procrastinate": ("procrastinate_jobs", "procrastinate_events"),
    "graphile-worker": ("graphile_worker._private_jobs",),
    "good_job": ("good_jobs", "good_job_executions"),
    "solid_queue": (
        "solid_queue_jobs",
        "solid_queue_ready_executions",
        "solid_queue_scheduled_executions",
        "solid_queue_claimed_executions",
        "solid_queue_blocked_executions",
        "solid_queue_failed_executions",
    ),
    "que": ("que_jobs",),
}
# The dead state: the state column's value, or the name queuebot's preset gives it.
DEAD = {
    "river": "discarded",
    "pg-boss": "failed",
    "oban": "discarded",
    "procrastinate": "failed",
    "graphile-worker": "dead",
    "good_job": "discarded",
    "solid_queue": "failed",
    "que": "expired",
}
# The dead jobs of the system's jobs table (TABLES' first), as a WHERE on its columns.
DEAD_WHERE = {
    "river": "state = 'discarded'",
    "pg-boss": "state = 'failed'",
    "oban": "state = 'discarded'",
    "procrastinate": "status = 'failed'",
    "graphile-worker": "attempts >= max_attempts",
    "good_job": "finished_at IS NOT NULL AND error IS NOT NULL",
    "solid_queue": "EXISTS (SELECT 1 FROM solid_queue_failed_executions f"
    " WHERE f.job_id = solid_queue_jobs.id)",
    "que": "expired_at IS NOT NULL",
}


def make_schemas(libpq_url: str, systems: list[str]) -> None:
    """Each system's schema, made as the preset tests make it."""
    from testkit.systems.good_job import DDL as GOOD_JOB_DDL
    from testkit.systems.oban import DDL as OBAN_DDL
    from testkit.systems.que import DDL as QUE_DDL
    from testkit.systems.river import DDL as RIVER_DDL
    from testkit.systems.solid_queue import DDL as SOLID_QUEUE_DDL

    with psycopg.connect(libpq_url, autocommit=True) as conn:
        if "river" in systems:
            conn.execute(RIVER_DDL)  # fixed text, no parameters
        if "oban" in systems:
            conn.execute(OBAN_DDL)
        if "procrastinate" in systems:
            from procrastinate.schema import SchemaManager

            conn.execute(SchemaManager.get_schema())
        for system, ddl in (
            ("good_job", GOOD_JOB_DDL),
            ("solid_queue", SOLID_QUEUE_DDL),
            ("que", QUE_DDL),
        ):
            if system in systems:
                conn.execute(ddl)  # fixed text, no parameters
    if "pg-boss" in systems:
        from testkit.systems.pgboss_system import PgBoss

        # boss.start() makes the schema; createQueue each queue (its partition and
        # indexes). No job is sent, so its worker finds nothing to run and stops.
        PgBoss().build(libpq_url, queues={q: (0, 0) for q in PGBOSS_QUEUES})
    if "graphile-worker" in systems:
        from testkit.systems.graphile_system import GraphileWorker

        # Its runMigrations makes the schema; no job is added, so its worker stops at once.
        GraphileWorker().build(libpq_url, queues={})


def fill(libpq_url: str, system: str, rows: int, dead: int, now: datetime) -> None:
    """Empty the system's tables, fill them (triggers off: its events are written as its
    triggers would have), then VACUUM ANALYZE."""
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(f"TRUNCATE {', '.join(TABLES[system])} CASCADE")
            for statement in FILLS[system](rows, dead, now):
                conn.execute(statement)  # built from fixed text and integers, no parameters
        for table in TABLES[system]:
            conn.execute(f"VACUUM (ANALYZE) {table}")
