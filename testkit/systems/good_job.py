"""GoodJob (Ruby, Rails): its tables as its install migration and later updates leave them,
jobs enqueued as its ActiveJob adapter writes them, and a stand-in for its executor that
claims and settles jobs the way GoodJob 4 does. Neither Ruby nor GoodJob can run here.

The tables: ``good_jobs`` (uuid ids; no status column), ``good_job_executions`` (one row
per run, with its error), ``good_job_processes``, ``good_job_settings`` and
``good_job_batches``, with the indexes its migrations make (as far as known: the dequeue,
cron, concurrency, batch, label and finished-at ones). Rails ``datetime`` columns:
``timestamp(6) without time zone`` holding UTC.

The job class is taken to be ``SendEmailJob`` with ``retry_on Timeout::Error, wait:
0.2.seconds, attempts: 2`` and no block. GoodJob jobs are discrete (``is_discrete``): a
retry reuses the row. The stand-in, like GoodJob:

- enqueue: a row with ``id = active_job_id``, ``scheduled_at = created_at``,
  ``serialized_params`` as ActiveJob serializes the job, ``executions_count`` 0; NOTIFY
  ``good_job`` with ``{"queue_name", "scheduled_at"}``.
- claim (its ``locked_by_id`` lock strategy): an unfinished, unlocked, due job by
  priority (nulls last) and created_at gets ``performed_at``, ``locked_by_id``,
  ``locked_at`` and one more ``executions_count``; a ``good_job_executions`` row is made
  for the run.
- success: ``finished_at`` set, ``error`` and ``error_event`` cleared, the lock cleared;
  the execution row finished.
- failure with an attempt left (ActiveJob retries it): ``error`` = "Class: message",
  ``error_event`` 3 (retried), ``scheduled_at`` 0.2 s ahead, ``performed_at`` and
  ``finished_at`` null, the lock cleared; ``serialized_params`` counts the execution.
- failure on the last attempt (ActiveJob stops retrying and re-raises): ``finished_at``
  and ``error`` set, ``error_event`` 4 (retry_stopped). A ``discard_on`` error would
  write 5 (discarded); both are dead: finished with an error.

Assumed where the facts were thin: the success path clears ``error``/``error_event`` (so
a retried job that then succeeds shows no error); ``good_job_executions`` rows keep the
error of each run with ``error_event`` and ``error_backtrace``.
"""

from __future__ import annotations

import json
import time
import uuid

import psycopg
from psycopg import sql

from testkit.systems import FAULT_MESSAGE, MAX_ATTEMPTS, Enqueued, Made, ToolFailed, made_from

JOB_CLASS = "SendEmailJob"
ERROR_CLASS = "Timeout::Error"
RETRIED, RETRY_STOPPED = 3, 4  # GoodJob's error_event values (5 is discarded)
RETRY_WAIT = 0.2  # seconds: the job class's retry_on wait
UTC_NOW = "timezone('UTC', now())"

DDL = """
CREATE TABLE good_jobs (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  queue_name text,
  priority integer,
  serialized_params jsonb,
  scheduled_at timestamp(6) without time zone,
  performed_at timestamp(6) without time zone,
  finished_at timestamp(6) without time zone,
  error text,
  created_at timestamp(6) without time zone NOT NULL,
  updated_at timestamp(6) without time zone NOT NULL,
  active_job_id uuid,
  concurrency_key text,
  cron_key text,
  retried_good_job_id uuid,
  cron_at timestamp(6) without time zone,
  batch_id uuid,
  batch_callback_id uuid,
  is_discrete boolean,
  executions_count integer,
  job_class text,
  error_event smallint,
  labels text[],
  locked_by_id uuid,
  locked_at timestamp(6) without time zone
);
CREATE INDEX index_good_jobs_on_queue_name_and_scheduled_at
  ON good_jobs (queue_name, scheduled_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_active_job_id_and_created_at
  ON good_jobs (active_job_id, created_at);
CREATE INDEX index_good_jobs_on_concurrency_key_when_unfinished
  ON good_jobs (concurrency_key) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_concurrency_key_and_created_at
  ON good_jobs (concurrency_key, created_at);
CREATE INDEX index_good_jobs_on_cron_key_and_created_at_cond
  ON good_jobs (cron_key, created_at) WHERE cron_key IS NOT NULL;
CREATE UNIQUE INDEX index_good_jobs_on_cron_key_and_cron_at_cond
  ON good_jobs (cron_key, cron_at) WHERE cron_key IS NOT NULL;
CREATE INDEX index_good_jobs_jobs_on_finished_at
  ON good_jobs (finished_at) WHERE retried_good_job_id IS NULL AND finished_at IS NOT NULL;
CREATE INDEX index_good_jobs_jobs_on_priority_created_at_when_unfinished
  ON good_jobs (priority DESC NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_job_jobs_for_candidate_lookup
  ON good_jobs (priority ASC NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_priority_scheduled_at_unfinished_unlocked
  ON good_jobs (priority ASC NULLS LAST, scheduled_at)
  WHERE finished_at IS NULL AND locked_by_id IS NULL;
CREATE INDEX index_good_jobs_on_locked_by_id ON good_jobs (locked_by_id)
  WHERE locked_by_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_batch_id ON good_jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_batch_callback_id ON good_jobs (batch_callback_id)
  WHERE batch_callback_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_labels ON good_jobs USING gin (labels)
  WHERE labels IS NOT NULL;
CREATE INDEX index_good_jobs_on_job_class ON good_jobs (job_class);

CREATE TABLE good_job_executions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamp(6) without time zone NOT NULL,
  updated_at timestamp(6) without time zone NOT NULL,
  active_job_id uuid NOT NULL,
  job_class text,
  queue_name text,
  serialized_params jsonb,
  scheduled_at timestamp(6) without time zone,
  finished_at timestamp(6) without time zone,
  error text,
  error_event smallint,
  error_backtrace text[],
  process_id uuid,
  duration interval
);
CREATE INDEX index_good_job_executions_on_active_job_id_and_created_at
  ON good_job_executions (active_job_id, created_at);
CREATE INDEX index_good_job_executions_on_process_id_and_created_at
  ON good_job_executions (process_id, created_at);

CREATE TABLE good_job_processes (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamp(6) without time zone NOT NULL,
  updated_at timestamp(6) without time zone NOT NULL,
  state jsonb,
  lock_type smallint
);

CREATE TABLE good_job_settings (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamp(6) without time zone NOT NULL,
  updated_at timestamp(6) without time zone NOT NULL,
  key text,
  value jsonb
);
CREATE UNIQUE INDEX index_good_job_settings_on_key ON good_job_settings (key);

CREATE TABLE good_job_batches (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamp(6) without time zone NOT NULL,
  updated_at timestamp(6) without time zone NOT NULL,
  description text,
  serialized_properties jsonb,
  on_finish text,
  on_success text,
  on_discard text,
  callback_queue_name text,
  callback_priority integer,
  enqueued_at timestamp(6) without time zone,
  discarded_at timestamp(6) without time zone,
  finished_at timestamp(6) without time zone,
  jobs_finished_at timestamp(6) without time zone
);
"""

INSERT = f"""
INSERT INTO good_jobs (id, active_job_id, queue_name, priority, serialized_params,
  scheduled_at, created_at, updated_at, is_discrete, executions_count, job_class)
VALUES (%(id)s, %(id)s, %(queue)s, 0, %(params)s, {UTC_NOW}, {UTC_NOW}, {UTC_NOW}, true, 0,
  '{JOB_CLASS}')
"""
CLAIM = f"""
WITH c AS (
  SELECT id FROM good_jobs
  WHERE finished_at IS NULL AND locked_by_id IS NULL AND scheduled_at <= {UTC_NOW}
  ORDER BY priority ASC NULLS LAST, created_at
  LIMIT 10
  FOR UPDATE SKIP LOCKED
)
UPDATE good_jobs j
SET performed_at = {UTC_NOW}, locked_by_id = %(process)s, locked_at = {UTC_NOW},
    executions_count = coalesce(j.executions_count, 0) + 1, updated_at = {UTC_NOW}
FROM c WHERE j.id = c.id
RETURNING j.id, j.executions_count, j.serialized_params
"""
EXECUTION = f"""
INSERT INTO good_job_executions (created_at, updated_at, active_job_id, job_class,
  queue_name, serialized_params, scheduled_at, process_id)
SELECT {UTC_NOW}, {UTC_NOW}, active_job_id, job_class, queue_name, serialized_params,
  scheduled_at, %(process)s
FROM good_jobs WHERE id = %(id)s
RETURNING id
"""
FINISH_EXECUTION = f"""
UPDATE good_job_executions
SET finished_at = {UTC_NOW}, updated_at = {UTC_NOW}, error = %(error)s,
    error_event = %(event)s, error_backtrace = %(backtrace)s,
    duration = {UTC_NOW} - created_at
WHERE id = %(execution)s
"""
SUCCEED = f"""
UPDATE good_jobs
SET finished_at = {UTC_NOW}, error = NULL, error_event = NULL, locked_by_id = NULL,
    locked_at = NULL, updated_at = {UTC_NOW}
WHERE id = %(id)s AND locked_by_id = %(process)s
"""
RETRY = f"""
UPDATE good_jobs
SET error = %(error)s, error_event = {RETRIED},
    scheduled_at = {UTC_NOW} + %(wait)s * interval '1 second',
    performed_at = NULL, finished_at = NULL, locked_by_id = NULL, locked_at = NULL,
    serialized_params = serialized_params
      || jsonb_build_object('executions', executions_count,
                            'exception_executions',
                            jsonb_build_object('[{ERROR_CLASS}]', executions_count)),
    updated_at = {UTC_NOW}
WHERE id = %(id)s AND locked_by_id = %(process)s
"""
STOP = f"""
UPDATE good_jobs
SET finished_at = {UTC_NOW}, error = %(error)s, error_event = {RETRY_STOPPED},
    locked_by_id = NULL, locked_at = NULL, updated_at = {UTC_NOW}
WHERE id = %(id)s AND locked_by_id = %(process)s
"""
PENDING = f"""
SELECT count(*), coalesce(extract(epoch FROM min(scheduled_at) - {UTC_NOW}), 0)::float
FROM good_jobs WHERE finished_at IS NULL
"""
# GoodJob's dashboard names: scheduled, retried, queued, running, succeeded, discarded.
STATE = f"""
SELECT id::text,
       CASE WHEN finished_at IS NOT NULL AND error IS NOT NULL THEN 'discarded'
            WHEN finished_at IS NOT NULL THEN 'succeeded'
            WHEN performed_at IS NOT NULL THEN 'running'
            WHEN error IS NOT NULL THEN 'retried'
            WHEN scheduled_at > {UTC_NOW} THEN 'scheduled'
            ELSE 'queued' END
FROM good_jobs WHERE id = ANY(%s::uuid[])
"""
BACKTRACE = [
    "/usr/lib/ruby/3.3.0/net/protocol.rb:229:in `rbuf_fill'",
    "app/jobs/send_email_job.rb:9:in `perform'",
]


def _params(job_id: str, queue: str, fail: bool, n: int) -> str:
    """The job as ActiveJob serializes it."""
    return json.dumps(
        {
            "job_class": JOB_CLASS,
            "job_id": job_id,
            "provider_job_id": None,
            "queue_name": queue,
            "priority": None,
            "arguments": [{"fail": fail, "n": n, "_aj_symbol_keys": ["fail", "n"]}],
            "executions": 0,
            "exception_executions": {},
            "locale": "en",
            "timezone": "UTC",
            "enqueued_at": time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime()),
            "scheduled_at": None,
        }
    )


class GoodJob:
    name = "good_job"
    dead_state = "discarded"
    ok_state: str | None = "succeeded"

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema
        self.process = str(uuid.uuid4())

    def _connect(self, url: str) -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(url, autocommit=True)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn

    def build(self, url: str, *, queues: dict[str, tuple[int, int]]) -> Made:
        enqueued: Enqueued = {}
        with self._connect(url) as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            conn.execute(DDL)  # fixed text, no parameters
            for queue, (ok, failing) in queues.items():
                ids: dict[str, list[str]] = {"ok": [], "failing": []}
                for n in range(ok + failing):
                    kind = "ok" if n < ok else "failing"
                    job_id = str(uuid.uuid4())
                    params = _params(job_id, queue, kind == "failing", n)
                    with conn.transaction():
                        conn.execute(
                            INSERT,
                            {
                                "id": job_id,
                                "queue": queue,
                                "params": params,
                                "job_class": JOB_CLASS,
                            },
                        )
                        notice = {"queue_name": queue, "scheduled_at": None}
                        conn.execute("SELECT pg_notify('good_job', %s)", (json.dumps(notice),))
                    ids[kind].append(job_id)
                enqueued[queue] = ids
        self.work(url, fault=True)
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        process = {"process": self.process}
        with self._connect(url) as conn:
            conn.execute(
                f"INSERT INTO good_job_processes (id, created_at, updated_at, state, lock_type)"
                f" VALUES (%(process)s, {UTC_NOW}, {UTC_NOW}, %(state)s, 1)"
                " ON CONFLICT (id) DO NOTHING",
                {**process, "state": json.dumps({"hostname": "queuebot-tests", "pid": 1})},
            )
            while True:
                for job_id, executions, params in conn.execute(CLAIM, process).fetchall():
                    self._run(conn, job_id, int(str(executions)), params, fault=fault)
                row = conn.execute(PENDING).fetchone()
                left, wait = (int(str(row[0])), float(str(row[1]))) if row else (0, 0.0)
                if left == 0:
                    break
                if time.monotonic() > deadline:
                    raise ToolFailed(f"good_job: jobs still unfinished after {timeout} s")
                time.sleep(min(max(wait, 0.0), 1.0) + 0.02)
            conn.execute("DELETE FROM good_job_processes WHERE id = %(process)s", process)

    def _run(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        job_id: object,
        executions: int,
        params: object,
        *,
        fault: bool,
    ) -> None:
        ids = {"id": job_id, "process": self.process}
        row = conn.execute(EXECUTION, ids).fetchone()
        assert row is not None
        execution = {"execution": row[0]}
        args = params.get("arguments", [{}])[0] if isinstance(params, dict) else {}
        with conn.transaction():
            if fault and isinstance(args, dict) and args.get("fail"):
                message = FAULT_MESSAGE.split(": ", 1)[1]
                error = f"{ERROR_CLASS}: {message} (job {args.get('n')})"
                event = RETRIED if executions < MAX_ATTEMPTS else RETRY_STOPPED
                if event == RETRIED:
                    conn.execute(RETRY, {**ids, "error": error, "wait": RETRY_WAIT})
                else:
                    conn.execute(STOP, {**ids, "error": error})
                conn.execute(
                    FINISH_EXECUTION,
                    {**execution, "error": error, "event": event, "backtrace": BACKTRACE},
                )
            else:
                conn.execute(SUCCEED, ids)
                conn.execute(
                    FINISH_EXECUTION,
                    {**execution, "error": None, "event": None, "backtrace": None},
                )

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with self._connect(url) as conn:
            rows = conn.execute(STATE, (ids,)).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
