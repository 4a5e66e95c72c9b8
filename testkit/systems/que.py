"""Que 2.x (Ruby): its tables as its migrations (version 7) leave them, jobs enqueued as
``Que::Job.enqueue`` writes them, and a stand-in for its locker and workers that works and
settles jobs the way Que does. Neither Ruby nor Que can run here.

The tables: ``que_jobs`` (no status column; its CHECKs on error lengths, args an array,
data an object; the poll index over unfinished, unexpired jobs), ``que_lockers``
(unlogged) and ``que_values``; the trigger ``que_job_notify``, which notifies a listening
locker's own channel (``que_listener_<pid>``) only, so none here. The table's comment
holds the migration version, as Que records it.

The job class is taken to be ``SendEmail`` with ``self.maximum_retry_count = 1`` (two
runs) and a retry interval of 0.2 s (Que's default is ``error_count ** 4 + 3`` s). Jobs
carry keyword arguments (``kwargs``, ``job_schema_version`` 2). The stand-in, like Que:
its locker takes due, unfinished, unexpired jobs by priority, run_at, id and holds each
with a session advisory lock on the job's id (``pg_try_advisory_lock``) while it runs;

- success: the row is DELETEd (Que's default when a job neither finishes nor destroys
  itself), so an ok job's state is None;
- failure with a retry left: ``error_count + 1``, ``last_error_message`` ("Class:
  message", at most 500 characters), ``last_error_backtrace``, ``run_at`` ahead;
- failure with none left: ``error_count + 1`` and ``expired_at`` only: the final
  attempt's error is not written (the message kept is the previous attempt's).
"""

from __future__ import annotations

import json
import time

import psycopg
from psycopg import sql

from testkit.systems import FAULT_MESSAGE, MAX_ATTEMPTS, Enqueued, Made, ToolFailed, made_from

JOB_CLASS = "SendEmail"
ERROR_CLASS = "Timeout::Error"
RETRY_WAIT = 0.2  # seconds: the job class's retry interval
MAXIMUM_RETRY_COUNT = MAX_ATTEMPTS - 1

DDL = """
CREATE TABLE que_jobs (
  priority smallint NOT NULL DEFAULT 100,
  run_at timestamptz NOT NULL DEFAULT now(),
  id bigserial PRIMARY KEY,
  job_class text NOT NULL,
  error_count integer NOT NULL DEFAULT 0,
  last_error_message text,
  queue text NOT NULL DEFAULT 'default',
  last_error_backtrace text,
  finished_at timestamptz,
  expired_at timestamptz,
  args jsonb NOT NULL DEFAULT '[]',
  data jsonb NOT NULL DEFAULT '{}',
  job_schema_version integer NOT NULL DEFAULT 1,
  kwargs jsonb NOT NULL DEFAULT '{}',
  CONSTRAINT error_length CHECK (
    char_length(last_error_message) <= 500 AND char_length(last_error_backtrace) <= 10000
  ),
  CONSTRAINT job_class_length CHECK (
    char_length(
      CASE job_class
      WHEN 'ActiveJob::QueueAdapters::QueAdapter::JobWrapper' THEN args->0->>'job_class'
      ELSE job_class END
    ) <= 200
  ),
  CONSTRAINT queue_length CHECK (char_length(queue) <= 100),
  CONSTRAINT valid_args CHECK (jsonb_typeof(args) = 'array'),
  CONSTRAINT valid_data CHECK (jsonb_typeof(data) = 'object')
) WITH (fillfactor = 90);
COMMENT ON TABLE que_jobs IS '7';
CREATE INDEX que_poll_idx ON que_jobs (job_schema_version, queue, priority, run_at, id)
  WHERE finished_at IS NULL AND expired_at IS NULL;
CREATE INDEX que_jobs_data_gin_idx ON que_jobs USING gin (data jsonb_path_ops);
CREATE INDEX que_jobs_args_gin_idx ON que_jobs USING gin (args jsonb_path_ops);
CREATE INDEX que_jobs_kwargs_gin_idx ON que_jobs USING gin (kwargs jsonb_path_ops);

CREATE TABLE que_values (
  key text PRIMARY KEY,
  value jsonb NOT NULL DEFAULT '{}',
  CONSTRAINT valid_value CHECK (jsonb_typeof(value) = 'object')
) WITH (fillfactor = 90);

CREATE UNLOGGED TABLE que_lockers (
  pid integer NOT NULL CONSTRAINT que_lockers_pkey PRIMARY KEY,
  worker_count integer NOT NULL,
  worker_priorities integer[] NOT NULL,
  ruby_pid integer NOT NULL,
  ruby_hostname text NOT NULL,
  queues text[] NOT NULL,
  listening boolean NOT NULL,
  job_schema_version integer DEFAULT 1,
  CONSTRAINT valid_worker_priorities CHECK (
    array_ndims(worker_priorities) = 1 AND array_length(worker_priorities, 1) IS NOT NULL
  ),
  CONSTRAINT valid_queues CHECK (array_ndims(queues) = 1 AND array_length(queues, 1) IS NOT NULL)
);

CREATE FUNCTION que_job_notify() RETURNS trigger AS $$
  DECLARE
    locker_pid integer;
    sort_key json;
  BEGIN
    IF NEW.run_at IS NOT NULL AND NEW.run_at > now() THEN
      RETURN null;
    END IF;
    SELECT pid INTO locker_pid
    FROM (
      SELECT *, last_value(row_number) OVER () + 1 AS count
      FROM (
        SELECT *, row_number() OVER () - 1 AS row_number
        FROM (
          SELECT * FROM que_lockers ql, generate_series(1, ql.worker_count) AS id
          WHERE listening AND queues @> ARRAY[NEW.queue]
            AND ql.job_schema_version = NEW.job_schema_version
          ORDER BY md5(pid::text || id::text)
        ) t1
      ) t2
    ) t3
    WHERE NEW.id % count = row_number;
    IF locker_pid IS NOT NULL THEN
      SELECT row_to_json(t) INTO sort_key
      FROM (
        SELECT 'job_available' AS message_type, NEW.queue AS queue,
               NEW.priority AS priority, NEW.id AS id,
               to_char(NEW.run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS run_at
      ) t;
      PERFORM pg_notify('que_listener_' || locker_pid::text, sort_key::text);
    END IF;
    RETURN null;
  END
$$ LANGUAGE plpgsql;

CREATE TRIGGER que_job_notify
  AFTER INSERT ON que_jobs
  FOR EACH ROW
  WHEN (NOT coalesce(current_setting('que.skip_notify', true), '') = 'true')
  EXECUTE FUNCTION que_job_notify();
"""

INSERT = """
INSERT INTO que_jobs (queue, priority, run_at, job_class, args, kwargs, data,
  job_schema_version)
VALUES (%(queue)s, 100, now(), %(class)s, '[]', %(kwargs)s, '{}', 2)
RETURNING id
"""
# Its locker: due, unfinished, unexpired jobs in poll order, each under an advisory lock.
CANDIDATES = """
SELECT id FROM que_jobs
WHERE finished_at IS NULL AND expired_at IS NULL AND run_at <= now()
  AND job_schema_version = 2
ORDER BY priority, run_at, id
LIMIT 10
"""
LOCK = "SELECT pg_try_advisory_lock(%(id)s)"
UNLOCK = "SELECT pg_advisory_unlock(%(id)s)"
# Checked again under the lock: another locker may have worked it meanwhile.
JOB = """
SELECT error_count, kwargs FROM que_jobs
WHERE id = %(id)s AND finished_at IS NULL AND expired_at IS NULL AND run_at <= now()
"""
DESTROY = "DELETE FROM que_jobs WHERE id = %(id)s"
RETRY = """
UPDATE que_jobs
SET error_count = error_count + 1,
    run_at = now() + %(wait)s * interval '1 second',
    last_error_message = left(%(message)s, 500),
    last_error_backtrace = left(%(backtrace)s, 10000)
WHERE id = %(id)s
"""
EXPIRE = "UPDATE que_jobs SET error_count = error_count + 1, expired_at = now() WHERE id = %(id)s"
PENDING = """
SELECT count(*), coalesce(extract(epoch FROM min(run_at) - now()), 0)::float
FROM que_jobs WHERE finished_at IS NULL AND expired_at IS NULL
"""
# As Que's own que_determine_job_state, with expired first.
STATE = """
SELECT id::text,
       CASE WHEN expired_at IS NOT NULL THEN 'expired'
            WHEN finished_at IS NOT NULL THEN 'finished'
            WHEN error_count > 0 THEN 'errored'
            WHEN run_at > now() THEN 'scheduled'
            ELSE 'ready' END
FROM que_jobs WHERE id = ANY(%s)
"""
BACKTRACE = (
    "/usr/lib/ruby/3.3.0/net/protocol.rb:229:in `rbuf_fill'\napp/jobs/send_email.rb:9:in `run'"
)


class Que:
    name = "que"
    dead_state = "expired"
    ok_state: str | None = None  # a success deletes the job

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
                    kwargs = json.dumps({"fail": kind == "failing", "n": n})
                    row = conn.execute(
                        INSERT, {"queue": queue, "class": JOB_CLASS, "kwargs": kwargs}
                    ).fetchone()
                    assert row is not None
                    ids[kind].append(str(row[0]))
                enqueued[queue] = ids
        self.work(url, fault=True)
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._connect(url) as conn:
            while True:
                worked = 0
                for (job_id,) in conn.execute(CANDIDATES).fetchall():
                    held = conn.execute(LOCK, {"id": job_id}).fetchone()
                    if not held or not held[0]:
                        continue
                    try:
                        worked += self._run(conn, job_id, fault=fault)
                    finally:
                        conn.execute(UNLOCK, {"id": job_id})
                row = conn.execute(PENDING).fetchone()
                left, wait = (int(str(row[0])), float(str(row[1]))) if row else (0, 0.0)
                if left == 0:
                    return
                if time.monotonic() > deadline:
                    raise ToolFailed(f"que: jobs still runnable after {timeout} s")
                if not worked:
                    time.sleep(min(max(wait, 0.0), 1.0) + 0.02)

    @staticmethod
    def _run(conn: psycopg.Connection[tuple[object, ...]], job_id: object, *, fault: bool) -> int:
        row = conn.execute(JOB, {"id": job_id}).fetchone()
        if row is None:
            return 0
        error_count, kwargs = int(str(row[0])), row[1]
        if not (fault and isinstance(kwargs, dict) and kwargs.get("fail")):
            conn.execute(DESTROY, {"id": job_id})
        elif error_count + 1 > MAXIMUM_RETRY_COUNT:
            conn.execute(EXPIRE, {"id": job_id})
        else:
            message = FAULT_MESSAGE.split(": ", 1)[1]
            conn.execute(
                RETRY,
                {
                    "id": job_id,
                    "wait": RETRY_WAIT,
                    "message": f"{ERROR_CLASS}: {message} (job {kwargs.get('n')})",
                    "backtrace": BACKTRACE,
                },
            )
        return 1

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with self._connect(url) as conn:
            rows = conn.execute(STATE, ([int(i) for i in ids],)).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
