"""Oban (Elixir): its table as its migrations leave it, jobs inserted as Oban inserts them,
and a stand-in for its queue producers that fetches and settles jobs the way Oban does.
Neither Elixir nor Oban can run here.

The table is that of Oban's Postgres migrations up to version 15 (recorded, as Oban does,
as the comment on ``oban_jobs``): the enum ``oban_job_state`` (available, suspended,
scheduled, executing, retryable, completed, discarded, cancelled); ``oban_jobs`` with its
CHECKs (``attempt`` between 0 and ``max_attempts``, ``max_attempts`` positive, priority not
negative, queue and worker 1 to 127 characters) and its timestamps without zone, in UTC;
``oban_peers``. Oban's triggers are gone since its migration 12: inserting, Oban's
notifier sends ``<prefix>.oban_insert`` with ``{"queue": "<queue>"}``, and so does
``build``.

The stand-in, like Oban: fetching sets ``executing``, ``attempt + 1``, ``attempted_at`` and
``attempted_by`` (node, producer); a success sets ``completed`` and ``completed_at``; an
error appends ``{"attempt", "at", "error"}`` to ``errors`` and sets ``retryable`` (no
backoff here) or, at ``max_attempts``, ``discarded`` with ``discarded_at``. Its stager
makes due ``scheduled`` and ``retryable`` jobs ``available``. No pruner runs (Oban's
default one deletes discarded jobs after 60 s).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from testkit.systems import FAULT_MESSAGE, MAX_ATTEMPTS, Enqueued, Made, ToolFailed, made_from

WORKER = "Shop.Workers.SendEmail"
NODE = "queuebot-tests@localhost"
PRODUCER = "6f1c1f0e-0b5e-4c1e-9a53-1f2e3d4c5b6a"
UTC_NOW = "timezone('UTC', now())"

DDL = f"""
CREATE TYPE oban_job_state AS ENUM (
  'available', 'suspended', 'scheduled', 'executing', 'retryable', 'completed',
  'discarded', 'cancelled'
);

CREATE TABLE oban_jobs (
  id bigserial PRIMARY KEY,
  state oban_job_state NOT NULL DEFAULT 'available',
  queue text NOT NULL DEFAULT 'default',
  worker text NOT NULL,
  args jsonb NOT NULL DEFAULT '{{}}',
  errors jsonb[] NOT NULL DEFAULT ARRAY[]::jsonb[],
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 20,
  inserted_at timestamp without time zone NOT NULL DEFAULT {UTC_NOW},
  scheduled_at timestamp without time zone NOT NULL DEFAULT {UTC_NOW},
  attempted_at timestamp without time zone,
  completed_at timestamp without time zone,
  attempted_by text[],
  discarded_at timestamp without time zone,
  priority integer NOT NULL DEFAULT 0,
  tags text[] DEFAULT ARRAY[]::text[],
  meta jsonb DEFAULT '{{}}',
  cancelled_at timestamp without time zone,
  CONSTRAINT attempt_range CHECK (attempt BETWEEN 0 AND max_attempts),
  CONSTRAINT positive_max_attempts CHECK (max_attempts > 0),
  CONSTRAINT non_negative_priority CHECK (priority >= 0),
  CONSTRAINT queue_length CHECK (char_length(queue) > 0 AND char_length(queue) < 128),
  CONSTRAINT worker_length CHECK (char_length(worker) > 0 AND char_length(worker) < 128)
);
CREATE INDEX oban_jobs_state_queue_priority_scheduled_at_id_index
  ON oban_jobs (state, queue, priority, scheduled_at, id);
CREATE INDEX oban_jobs_args_index ON oban_jobs USING gin (args);
CREATE INDEX oban_jobs_meta_index ON oban_jobs USING gin (meta);
CREATE INDEX oban_jobs_state_cancelled_at_index ON oban_jobs (state, cancelled_at);
CREATE INDEX oban_jobs_state_discarded_at_index ON oban_jobs (state, discarded_at);
CREATE INDEX oban_jobs_staging_idx ON oban_jobs (scheduled_at, id)
  WHERE state IN ('scheduled', 'retryable');
COMMENT ON TABLE oban_jobs IS '15';

CREATE UNLOGGED TABLE oban_peers (
  name text PRIMARY KEY,
  node text NOT NULL,
  started_at timestamp without time zone NOT NULL,
  expires_at timestamp without time zone NOT NULL
);
"""

INSERT = f"""
INSERT INTO oban_jobs (state, queue, worker, args, meta, tags, max_attempts, priority,
                       inserted_at, scheduled_at)
VALUES ('available', %(queue)s, %(worker)s, %(args)s, '{{}}', '{{}}', %(max)s, 0,
        {UTC_NOW}, {UTC_NOW})
RETURNING id
"""
# Oban's fetch: available jobs of a queue by priority, scheduled_at, id.
CLAIM = f"""
WITH locked AS (
  SELECT id FROM oban_jobs
  WHERE state = 'available'
  ORDER BY priority, scheduled_at, id
  LIMIT 10
  FOR UPDATE SKIP LOCKED
)
UPDATE oban_jobs j
SET state = 'executing', attempted_at = {UTC_NOW}, attempt = j.attempt + 1,
    attempted_by = ARRAY[%(node)s, %(producer)s]
FROM locked WHERE j.id = locked.id
RETURNING j.id, j.attempt, j.args
"""
COMPLETE = f"""
UPDATE oban_jobs SET state = 'completed', completed_at = {UTC_NOW}
WHERE id = %(id)s AND state = 'executing'
"""
FAIL = f"""
UPDATE oban_jobs
SET errors = array_append(errors, %(error)s::jsonb),
    state = CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'retryable' END
        ::oban_job_state,
    discarded_at = CASE WHEN attempt >= max_attempts THEN {UTC_NOW} END,
    scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE {UTC_NOW} END
WHERE id = %(id)s AND state = 'executing'
"""
# Oban's stager: due scheduled and retryable jobs become available.
STAGE = f"""
UPDATE oban_jobs SET state = 'available'
WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= {UTC_NOW}
"""
RUNNABLE = "SELECT count(*) FROM oban_jobs WHERE state IN ('available', 'retryable', 'executing')"


def _error(attempt: int, n: object) -> str:
    """An error entry as Oban writes it: the exception formatted the Elixir way."""
    return json.dumps(
        {
            "attempt": attempt,
            "at": datetime.now(UTC).replace(tzinfo=None).isoformat() + "Z",
            "error": f"** (RuntimeError) {FAULT_MESSAGE} (job {n})\n"
            "    (shop 0.1.0) lib/shop/workers/send_email.ex:14: "
            "Shop.Workers.SendEmail.perform/1",
        }
    )


class Oban:
    name = "oban"
    dead_state = "discarded"
    ok_state = "completed"

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema  # Oban's "prefix"

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
            with conn.transaction():
                for queue, (ok, failing) in queues.items():
                    ids: dict[str, list[str]] = {"ok": [], "failing": []}
                    for n in range(ok + failing):
                        kind = "ok" if n < ok else "failing"
                        args = json.dumps({"fail": kind == "failing", "n": n})
                        params = {"queue": queue, "worker": WORKER, "args": args}
                        row = conn.execute(INSERT, {**params, "max": MAX_ATTEMPTS}).fetchone()
                        assert row is not None
                        ids[kind].append(str(row[0]))
                    enqueued[queue] = ids
                    conn.execute(
                        "SELECT pg_notify(concat(current_schema(), '.oban_insert'), %s)",
                        (json.dumps({"queue": queue}),),
                    )
        self.work(url, fault=True)
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._connect(url) as conn:
            while True:
                conn.execute(STAGE)
                claim = {"node": NODE, "producer": PRODUCER}
                jobs = conn.execute(CLAIM, claim).fetchall()
                for job_id, attempt, args in jobs:
                    if fault and isinstance(args, dict) and args.get("fail"):
                        error = _error(int(str(attempt)), args.get("n"))
                        conn.execute(FAIL, {"id": job_id, "error": error})
                    else:
                        conn.execute(COMPLETE, {"id": job_id})
                row = conn.execute(RUNNABLE).fetchone()
                if not row or row[0] == 0:
                    return
                if time.monotonic() > deadline:
                    raise ToolFailed(f"oban: jobs still runnable after {timeout} s")
                if not jobs:
                    time.sleep(0.1)

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with self._connect(url) as conn:
            rows = conn.execute(
                "SELECT id::text, state::text FROM oban_jobs WHERE id = ANY(%s)",
                ([int(i) for i in ids],),
            ).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
