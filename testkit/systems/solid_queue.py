"""Solid Queue (Ruby, Rails): its tables as its schema file (db/queue_schema.rb, 1.x) makes
them, jobs enqueued as its ActiveJob adapter writes them, and a stand-in for its worker
and dispatcher that moves jobs through its execution tables the way Solid Queue does.
Neither Ruby nor Solid Queue can run here.

The tables: ``solid_queue_jobs`` (no status column: the state is which execution table
holds the job, or ``finished_at``) and one table per state, each with a unique
``job_id`` and a foreign key to the job ON DELETE CASCADE: ``_ready_executions``,
``_claimed_executions`` (``process_id``), ``_failed_executions`` (``error`` TEXT holding
JSON), ``_scheduled_executions``, ``_blocked_executions``, ``_recurring_executions``;
and ``_processes``, ``_pauses``, ``_semaphores``, ``_recurring_tasks``, with the indexes
of its schema file. Rails ``datetime``: ``timestamp(6) without time zone`` holding UTC.

The job class is taken to be ``SendEmailJob`` with ``retry_on Timeout::Error, wait:
0.2.seconds, attempts: 2`` and no block. ActiveJob's retry enqueues the job again: in
Solid Queue that is a NEW ``solid_queue_jobs`` row with the same ``active_job_id`` (and
``executions`` one more in ``arguments``), while the run that failed finishes. So a
failing job leaves two rows: the first finished, the second dead with a
``solid_queue_failed_executions`` row (``{"exception_class", "message", "backtrace"}``)
once ActiveJob stops retrying and re-raises. ``build`` reports the ids of those last rows
as the dead jobs.

The stand-in, like Solid Queue: enqueue writes the job and its ready (or, when due
later, scheduled) execution in one transaction; the dispatcher moves due scheduled
executions to ready; a worker (a row of ``solid_queue_processes``) claims ready
executions by priority and job id (``FOR UPDATE SKIP LOCKED``), inserting claimed rows
and deleting the ready ones; a success sets ``finished_at`` (jobs are kept, its default)
and deletes the claimed row; a failure inserts the failed execution and deletes the
claimed row. Solid Queue sends no NOTIFY: it polls.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import psycopg
from psycopg import sql

from testkit.systems import FAULT_MESSAGE, MAX_ATTEMPTS, Enqueued, Made, ToolFailed, made_from

JOB_CLASS = "SendEmailJob"
ERROR_CLASS = "Timeout::Error"
RETRY_WAIT = 0.2  # seconds: the job class's retry_on wait
UTC_NOW = "timezone('UTC', now())"
TS = "timestamp(6) without time zone"

DDL = f"""
CREATE TABLE solid_queue_jobs (
  id bigserial PRIMARY KEY,
  queue_name varchar NOT NULL,
  class_name varchar NOT NULL,
  arguments text,
  priority integer NOT NULL DEFAULT 0,
  active_job_id varchar,
  scheduled_at {TS},
  finished_at {TS},
  concurrency_key varchar,
  created_at {TS} NOT NULL,
  updated_at {TS} NOT NULL
);
CREATE INDEX index_solid_queue_jobs_on_active_job_id ON solid_queue_jobs (active_job_id);
CREATE INDEX index_solid_queue_jobs_on_class_name ON solid_queue_jobs (class_name);
CREATE INDEX index_solid_queue_jobs_on_finished_at ON solid_queue_jobs (finished_at);
CREATE INDEX index_solid_queue_jobs_for_filtering ON solid_queue_jobs (queue_name, finished_at);
CREATE INDEX index_solid_queue_jobs_for_alerting ON solid_queue_jobs (scheduled_at, finished_at);

CREATE TABLE solid_queue_ready_executions (
  id bigserial PRIMARY KEY,
  job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
  queue_name varchar NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  created_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_ready_executions_on_job_id
  ON solid_queue_ready_executions (job_id);
CREATE INDEX index_solid_queue_poll_all ON solid_queue_ready_executions (priority, job_id);
CREATE INDEX index_solid_queue_poll_by_queue
  ON solid_queue_ready_executions (queue_name, priority, job_id);

CREATE TABLE solid_queue_claimed_executions (
  id bigserial PRIMARY KEY,
  job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
  process_id bigint,
  created_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_claimed_executions_on_job_id
  ON solid_queue_claimed_executions (job_id);
CREATE INDEX index_solid_queue_claimed_executions_on_process_id_and_job_id
  ON solid_queue_claimed_executions (process_id, job_id);

CREATE TABLE solid_queue_failed_executions (
  id bigserial PRIMARY KEY,
  job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
  error text,
  created_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_failed_executions_on_job_id
  ON solid_queue_failed_executions (job_id);

CREATE TABLE solid_queue_scheduled_executions (
  id bigserial PRIMARY KEY,
  job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
  queue_name varchar NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  scheduled_at {TS} NOT NULL,
  created_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_scheduled_executions_on_job_id
  ON solid_queue_scheduled_executions (job_id);
CREATE INDEX index_solid_queue_dispatch_all
  ON solid_queue_scheduled_executions (scheduled_at, priority, job_id);

CREATE TABLE solid_queue_blocked_executions (
  id bigserial PRIMARY KEY,
  job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
  queue_name varchar NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  concurrency_key varchar NOT NULL,
  expires_at {TS} NOT NULL,
  created_at {TS} NOT NULL
);
CREATE INDEX index_solid_queue_blocked_executions_for_release
  ON solid_queue_blocked_executions (concurrency_key, priority, job_id);
CREATE INDEX index_solid_queue_blocked_executions_for_maintenance
  ON solid_queue_blocked_executions (expires_at, concurrency_key);
CREATE UNIQUE INDEX index_solid_queue_blocked_executions_on_job_id
  ON solid_queue_blocked_executions (job_id);

CREATE TABLE solid_queue_recurring_executions (
  id bigserial PRIMARY KEY,
  job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
  task_key varchar NOT NULL,
  run_at {TS} NOT NULL,
  created_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_recurring_executions_on_job_id
  ON solid_queue_recurring_executions (job_id);
CREATE UNIQUE INDEX index_solid_queue_recurring_executions_on_task_key_and_run_at
  ON solid_queue_recurring_executions (task_key, run_at);

CREATE TABLE solid_queue_recurring_tasks (
  id bigserial PRIMARY KEY,
  key varchar NOT NULL,
  schedule varchar NOT NULL,
  command varchar(2048),
  class_name varchar,
  arguments text,
  queue_name varchar,
  priority integer DEFAULT 0,
  static boolean NOT NULL DEFAULT true,
  description text,
  created_at {TS} NOT NULL,
  updated_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_recurring_tasks_on_key ON solid_queue_recurring_tasks (key);
CREATE INDEX index_solid_queue_recurring_tasks_on_static ON solid_queue_recurring_tasks (static);

CREATE TABLE solid_queue_processes (
  id bigserial PRIMARY KEY,
  kind varchar NOT NULL,
  last_heartbeat_at {TS} NOT NULL,
  supervisor_id bigint,
  pid integer NOT NULL,
  hostname varchar,
  metadata text,
  created_at {TS} NOT NULL,
  name varchar NOT NULL
);
CREATE INDEX index_solid_queue_processes_on_last_heartbeat_at
  ON solid_queue_processes (last_heartbeat_at);
CREATE UNIQUE INDEX index_solid_queue_processes_on_name_and_supervisor_id
  ON solid_queue_processes (name, supervisor_id);
CREATE INDEX index_solid_queue_processes_on_supervisor_id ON solid_queue_processes (supervisor_id);

CREATE TABLE solid_queue_pauses (
  id bigserial PRIMARY KEY,
  queue_name varchar NOT NULL,
  created_at {TS} NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_pauses_on_queue_name ON solid_queue_pauses (queue_name);

CREATE TABLE solid_queue_semaphores (
  id bigserial PRIMARY KEY,
  key varchar NOT NULL,
  value integer NOT NULL DEFAULT 1,
  expires_at {TS} NOT NULL,
  created_at {TS} NOT NULL,
  updated_at {TS} NOT NULL
);
CREATE INDEX index_solid_queue_semaphores_on_expires_at ON solid_queue_semaphores (expires_at);
CREATE INDEX index_solid_queue_semaphores_on_key_and_value ON solid_queue_semaphores (key, value);
CREATE UNIQUE INDEX index_solid_queue_semaphores_on_key ON solid_queue_semaphores (key);
"""

ENQUEUE = f"""
WITH job AS (
  INSERT INTO solid_queue_jobs (queue_name, class_name, arguments, priority, active_job_id,
    scheduled_at, created_at, updated_at)
  VALUES (%(queue)s, %(class)s, %(arguments)s, 0, %(active_job_id)s,
    {UTC_NOW} + %(wait)s * interval '1 second', {UTC_NOW}, {UTC_NOW})
  RETURNING id, queue_name, priority, scheduled_at
), ready AS (
  INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority, created_at)
  SELECT id, queue_name, priority, {UTC_NOW} FROM job WHERE scheduled_at <= {UTC_NOW}
), later AS (
  INSERT INTO solid_queue_scheduled_executions (job_id, queue_name, priority, scheduled_at,
    created_at)
  SELECT id, queue_name, priority, scheduled_at, {UTC_NOW} FROM job
  WHERE scheduled_at > {UTC_NOW}
)
SELECT id FROM job
"""
# Its dispatcher: due scheduled executions become ready.
DISPATCH = f"""
WITH due AS (
  DELETE FROM solid_queue_scheduled_executions WHERE scheduled_at <= {UTC_NOW}
  RETURNING job_id, queue_name, priority
)
INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority, created_at)
SELECT job_id, queue_name, priority, {UTC_NOW} FROM due
"""
CLAIM = f"""
WITH picked AS (
  SELECT id, job_id FROM solid_queue_ready_executions
  ORDER BY priority, job_id
  LIMIT 10
  FOR UPDATE SKIP LOCKED
), claimed AS (
  INSERT INTO solid_queue_claimed_executions (job_id, process_id, created_at)
  SELECT job_id, %(process)s, {UTC_NOW} FROM picked
  RETURNING job_id
), gone AS (
  DELETE FROM solid_queue_ready_executions r USING picked WHERE r.id = picked.id
)
SELECT j.id, j.queue_name, j.arguments, j.active_job_id
FROM solid_queue_jobs j JOIN claimed c ON c.job_id = j.id
ORDER BY j.priority, j.id
"""
FINISH = f"""
WITH gone AS (DELETE FROM solid_queue_claimed_executions WHERE job_id = %(id)s)
UPDATE solid_queue_jobs SET finished_at = {UTC_NOW}, updated_at = {UTC_NOW} WHERE id = %(id)s
"""
FAIL = f"""
WITH gone AS (DELETE FROM solid_queue_claimed_executions WHERE job_id = %(id)s)
INSERT INTO solid_queue_failed_executions (job_id, error, created_at)
VALUES (%(id)s, %(error)s, {UTC_NOW})
"""
PENDING = f"""
SELECT (SELECT count(*) FROM solid_queue_ready_executions)
     + (SELECT count(*) FROM solid_queue_claimed_executions)
     + (SELECT count(*) FROM solid_queue_scheduled_executions),
       coalesce((SELECT extract(epoch FROM min(scheduled_at) - {UTC_NOW})
                 FROM solid_queue_scheduled_executions), 0)::float
"""
STATE = """
SELECT j.id::text,
       CASE WHEN f.id IS NOT NULL THEN 'failed'
            WHEN c.id IS NOT NULL THEN 'claimed'
            WHEN r.id IS NOT NULL THEN 'ready'
            WHEN s.id IS NOT NULL THEN 'scheduled'
            WHEN b.id IS NOT NULL THEN 'blocked'
            WHEN j.finished_at IS NOT NULL THEN 'finished'
            ELSE 'unknown' END
FROM solid_queue_jobs j
LEFT JOIN solid_queue_failed_executions f ON f.job_id = j.id
LEFT JOIN solid_queue_claimed_executions c ON c.job_id = j.id
LEFT JOIN solid_queue_ready_executions r ON r.job_id = j.id
LEFT JOIN solid_queue_scheduled_executions s ON s.job_id = j.id
LEFT JOIN solid_queue_blocked_executions b ON b.job_id = j.id
WHERE j.id = ANY(%s)
"""
BACKTRACE = [
    "/usr/lib/ruby/3.3.0/net/protocol.rb:229:in `rbuf_fill'",
    "app/jobs/send_email_job.rb:9:in `perform'",
]


def _arguments(active_job_id: str, queue: str, args: dict[str, object], executions: int) -> str:
    """The job as ActiveJob serializes it (Solid Queue keeps it as JSON text)."""
    return json.dumps(
        {
            "job_class": JOB_CLASS,
            "job_id": active_job_id,
            "provider_job_id": None,
            "queue_name": queue,
            "priority": None,
            "arguments": [{**args, "_aj_symbol_keys": ["fail", "n"]}],
            "executions": executions,
            "exception_executions": {f"[{ERROR_CLASS}]": executions} if executions else {},
            "locale": "en",
            "timezone": "UTC",
            "enqueued_at": time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime()),
            "scheduled_at": None,
        }
    )


class SolidQueue:
    name = "solid_queue"
    dead_state = "failed"
    ok_state: str | None = "finished"

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema

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
                    active_job_id = str(uuid.uuid4())
                    args: dict[str, object] = {"fail": kind == "failing", "n": n}
                    arguments = _arguments(active_job_id, queue, args, 0)
                    ids[kind].append(str(self._enqueue(conn, queue, arguments, active_job_id, 0)))
                enqueued[queue] = ids
        self.work(url, fault=True)
        # ActiveJob's retry made a new row per failing job: the dead job is the last one.
        with self._connect(url) as conn:
            for ids in enqueued.values():
                ids["failing"] = [self._last_row(conn, first) for first in ids["failing"]]
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    @staticmethod
    def _enqueue(
        conn: psycopg.Connection[tuple[object, ...]],
        queue: str,
        arguments: str,
        active_job_id: str,
        wait: float,
    ) -> object:
        params = {"queue": queue, "class": JOB_CLASS, "arguments": arguments}
        row = conn.execute(
            ENQUEUE, {**params, "active_job_id": active_job_id, "wait": wait}
        ).fetchone()
        assert row is not None
        return row[0]

    @staticmethod
    def _last_row(conn: psycopg.Connection[tuple[object, ...]], first: str) -> str:
        row = conn.execute(
            "SELECT max(j.id) FROM solid_queue_jobs j JOIN solid_queue_jobs f"
            " ON f.active_job_id = j.active_job_id WHERE f.id = %s",
            (int(first),),
        ).fetchone()
        return str(row[0]) if row and row[0] is not None else first

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._connect(url) as conn:
            row = conn.execute(
                "INSERT INTO solid_queue_processes (kind, last_heartbeat_at, pid, hostname,"
                f" metadata, created_at, name) VALUES ('Worker', {UTC_NOW}, %s, %s, %s,"
                f" {UTC_NOW}, %s) RETURNING id",
                (
                    os.getpid(),
                    socket.gethostname(),
                    json.dumps({"polling_interval": 0.1, "queues": "*", "thread_pool_size": 3}),
                    f"worker-{uuid.uuid4().hex[:20]}",
                ),
            ).fetchone()
            assert row is not None
            process = row[0]
            while True:
                conn.execute(DISPATCH)
                with conn.transaction():
                    jobs = conn.execute(CLAIM, {"process": process}).fetchall()
                for job_id, queue, arguments, active_job_id in jobs:
                    self._run(conn, job_id, str(queue), str(arguments), str(active_job_id), fault)
                left_row = conn.execute(PENDING).fetchone()
                left, wait = (
                    (int(str(left_row[0])), float(str(left_row[1]))) if left_row else (0, 0.0)
                )
                if left == 0:
                    break
                if time.monotonic() > deadline:
                    raise ToolFailed(f"solid_queue: jobs still pending after {timeout} s")
                if not jobs:
                    time.sleep(min(max(wait, 0.0), 1.0) + 0.02)
            conn.execute("DELETE FROM solid_queue_processes WHERE id = %s", (process,))

    def _run(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        job_id: object,
        queue: str,
        arguments: str,
        active_job_id: str,
        fault: bool,
    ) -> None:
        job = json.loads(arguments)
        args = job["arguments"][0]
        executions = int(job.get("executions", 0)) + 1  # ActiveJob counts this run
        with conn.transaction():
            if not (fault and args.get("fail")):
                conn.execute(FINISH, {"id": job_id})
            elif executions < MAX_ATTEMPTS:
                # retry_on: enqueued again as a new row; this run ends without an error
                plain = {"fail": args.get("fail"), "n": args.get("n")}
                again = _arguments(active_job_id, queue, plain, executions)
                self._enqueue(conn, queue, again, active_job_id, RETRY_WAIT)
                conn.execute(FINISH, {"id": job_id})
            else:
                message = FAULT_MESSAGE.split(": ", 1)[1]
                error = {
                    "exception_class": ERROR_CLASS,
                    "message": f"{message} (job {args.get('n')})",
                    "backtrace": BACKTRACE,
                }
                conn.execute(FAIL, {"id": job_id, "error": json.dumps(error)})

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with self._connect(url) as conn:
            rows = conn.execute(STATE, ([int(i) for i in ids],)).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
