"""River (Go): its tables as its migrations leave them, jobs inserted with its Python client
(PyPI ``riverqueue``), and a stand-in for its Go worker that claims and settles jobs the way
River does. River's schema and worker cannot run here (Go is not installable).

The tables are those of River's main migration line up to version 6: the enum
``river_job_state``; ``river_job`` with its CHECKs (``finalized_at`` set exactly when the
state is cancelled, completed or discarded; ``max_attempts`` positive; priority 1 to 4;
queue and kind 1 to 127 characters); ``river_queue``, ``river_leader`` (name 'default'),
``river_client`` and ``river_client_queue``, and ``river_migration`` recording versions
1 to 6 of the line ``main``.

River's Go client notifies ``<schema>.river_insert`` with ``{"queue": "<queue>"}`` in the
inserting transaction (no trigger since its migration 4); the Python client does not, so
``build`` sends it after its inserts, in the same transaction, as the Go client would.

The stand-in worker, like River's: fetching sets ``running``, ``attempt + 1``,
``attempted_at`` and appends the client's id to ``attempted_by`` (state ``available`` and
``scheduled_at <= now()``, by priority, scheduled_at, id); a success sets ``completed``
and ``finalized_at``; a failure appends ``{"at", "attempt", "error", "trace"}`` to
``errors`` and sets ``retryable`` (no backoff here: ``scheduled_at`` now) or, at
``max_attempts``, ``discarded`` with ``finalized_at``. Its scheduler moves ``retryable``
and ``scheduled`` jobs that are due back to ``available``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
import sqlalchemy
from psycopg import sql

from testkit.systems import FAULT_MESSAGE, MAX_ATTEMPTS, Enqueued, Made, ToolFailed, made_from

KIND = "send_email"
CLIENT_ID = "queuebot-tests-standin"

DDL = """
CREATE TYPE river_job_state AS ENUM (
  'available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable', 'running',
  'scheduled'
);

CREATE TABLE river_job (
  id bigserial PRIMARY KEY,
  state river_job_state NOT NULL DEFAULT 'available',
  attempt smallint NOT NULL DEFAULT 0,
  max_attempts smallint NOT NULL,
  attempted_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  finalized_at timestamptz,
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  priority smallint NOT NULL DEFAULT 1,
  args jsonb NOT NULL,
  attempted_by text[],
  errors jsonb[],
  kind text NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}',
  queue text NOT NULL DEFAULT 'default',
  tags varchar(255)[] NOT NULL DEFAULT '{}',
  unique_key bytea,
  unique_states bit(8),
  CONSTRAINT finalized_or_finalized_at_null CHECK (
    (finalized_at IS NULL AND state NOT IN ('cancelled', 'completed', 'discarded'))
    OR (finalized_at IS NOT NULL AND state IN ('cancelled', 'completed', 'discarded'))
  ),
  CONSTRAINT max_attempts_is_positive CHECK (max_attempts > 0),
  CONSTRAINT priority_in_range CHECK (priority >= 1 AND priority <= 4),
  CONSTRAINT queue_length CHECK (char_length(queue) > 0 AND char_length(queue) < 128),
  CONSTRAINT kind_length CHECK (char_length(kind) > 0 AND char_length(kind) < 128)
);
CREATE INDEX river_job_kind ON river_job (kind);
CREATE INDEX river_job_state_and_finalized_at_index ON river_job (state, finalized_at)
  WHERE finalized_at IS NOT NULL;
CREATE INDEX river_job_prioritized_fetching_index
  ON river_job (state, queue, priority, scheduled_at, id);
CREATE INDEX river_job_args_index ON river_job USING gin (args);
CREATE INDEX river_job_metadata_index ON river_job USING gin (metadata);
CREATE UNIQUE INDEX river_job_kind_unique_key_idx ON river_job (kind, unique_key)
  WHERE unique_key IS NOT NULL;

CREATE TABLE river_queue (
  name text PRIMARY KEY NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  metadata jsonb NOT NULL DEFAULT '{}',
  paused_at timestamptz,
  updated_at timestamptz NOT NULL
);

CREATE UNLOGGED TABLE river_leader (
  elected_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  leader_id text NOT NULL,
  name text PRIMARY KEY DEFAULT 'default',
  CONSTRAINT name_length CHECK (name = 'default'),
  CONSTRAINT leader_id_length CHECK (char_length(leader_id) > 0 AND char_length(leader_id) < 128)
);

CREATE UNLOGGED TABLE river_client (
  id text PRIMARY KEY NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  metadata jsonb NOT NULL DEFAULT '{}',
  paused_at timestamptz,
  updated_at timestamptz NOT NULL,
  CONSTRAINT name_length CHECK (char_length(id) > 0 AND char_length(id) < 128)
);

CREATE UNLOGGED TABLE river_client_queue (
  river_client_id text NOT NULL REFERENCES river_client (id) ON DELETE CASCADE,
  name text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  max_workers bigint NOT NULL DEFAULT 0,
  metadata jsonb NOT NULL DEFAULT '{}',
  num_jobs_completed bigint NOT NULL DEFAULT 0,
  num_jobs_running bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (river_client_id, name),
  CONSTRAINT name_length CHECK (char_length(name) > 0 AND char_length(name) < 128),
  CONSTRAINT num_jobs_completed_zero_or_positive CHECK (num_jobs_completed >= 0),
  CONSTRAINT num_jobs_running_zero_or_positive CHECK (num_jobs_running >= 0)
);

CREATE TABLE river_migration (
  line text NOT NULL,
  version bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT line_length CHECK (char_length(line) > 0 AND char_length(line) < 128),
  CONSTRAINT version_gte_1 CHECK (version >= 1),
  PRIMARY KEY (line, version)
);
INSERT INTO river_migration (line, version) SELECT 'main', v FROM generate_series(1, 6) v;
"""

# River's fetch: due available jobs, by priority, scheduled_at, id.
CLAIM = """
WITH locked AS (
  SELECT id FROM river_job
  WHERE state = 'available' AND scheduled_at <= now()
  ORDER BY priority, scheduled_at, id
  LIMIT 10
  FOR UPDATE SKIP LOCKED
)
UPDATE river_job j
SET state = 'running', attempt = j.attempt + 1, attempted_at = now(),
    attempted_by = array_append(j.attempted_by, %(client)s)
FROM locked WHERE j.id = locked.id
RETURNING j.id, j.attempt, j.max_attempts, j.args
"""
COMPLETE = """
UPDATE river_job SET state = 'completed', finalized_at = now()
WHERE id = %(id)s AND state = 'running'
"""
FAIL = """
UPDATE river_job
SET errors = array_append(errors, %(error)s::jsonb),
    state = CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'retryable' END
        ::river_job_state,
    finalized_at = CASE WHEN attempt >= max_attempts THEN now() END,
    scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE now() END
WHERE id = %(id)s AND state = 'running'
"""
# River's scheduler: due retryable and scheduled jobs become available.
SCHEDULE = """
UPDATE river_job SET state = 'available'
WHERE state IN ('retryable', 'scheduled') AND scheduled_at <= now()
"""
RUNNABLE = "SELECT count(*) FROM river_job WHERE state IN ('available', 'retryable', 'running')"


@dataclass
class _SendArgs:
    """River job args (``riverqueue.JobArgs``): kind and JSON."""

    fail: bool
    n: int
    kind: str = KIND

    def to_json(self) -> str:
        return json.dumps({"fail": self.fail, "n": self.n})


class River:
    name = "river"
    dead_state = "discarded"
    ok_state = "completed"

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema

    def _connect(self, url: str) -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(url, autocommit=True)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn

    def build(self, url: str, *, queues: dict[str, tuple[int, int]]) -> Made:
        with self._connect(url) as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            conn.execute(DDL)  # fixed text, no parameters
        enqueued = self._insert(url, queues)
        self.work(url, fault=True)
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    def _insert(self, url: str, queues: dict[str, tuple[int, int]]) -> Enqueued:
        import riverqueue
        from riverqueue.driver import riversqlalchemy

        engine = sqlalchemy.create_engine(
            url.replace("postgresql://", "postgresql+psycopg://", 1),
            connect_args={"options": f"-c search_path={self.schema}"},
        )
        out: Enqueued = {}
        try:
            with engine.begin() as conn:
                client = riverqueue.Client(riversqlalchemy.Driver(conn))
                for queue, (ok, failing) in queues.items():
                    ids: dict[str, list[str]] = {"ok": [], "failing": []}
                    opts = riverqueue.InsertOpts(max_attempts=MAX_ATTEMPTS, queue=queue)
                    for n in range(ok + failing):
                        kind = "ok" if n < ok else "failing"
                        res = client.insert(_SendArgs(fail=kind == "failing", n=n), opts)
                        ids[kind].append(str(res.job.id))
                    out[queue] = ids
                    conn.execute(
                        sqlalchemy.text(
                            "SELECT pg_notify(concat(current_schema(), '.river_insert'), :p)"
                        ),
                        {"p": json.dumps({"queue": queue})},
                    )
        finally:
            engine.dispose()
        return out

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._connect(url) as conn:
            while True:
                conn.execute(SCHEDULE)
                jobs = conn.execute(CLAIM, {"client": CLIENT_ID}).fetchall()
                for job_id, attempt, _max, args in jobs:
                    if fault and isinstance(args, dict) and args.get("fail"):
                        error = {
                            "at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                            "attempt": attempt,
                            "error": f"{FAULT_MESSAGE} (job {args.get('n')})",
                            "trace": "goroutine 42 [running]:\nmain.(*SendWorker).Work(...)\n"
                            "\t/app/worker.go:31 +0x1d",
                        }
                        conn.execute(FAIL, {"id": job_id, "error": json.dumps(error)})
                    else:
                        conn.execute(COMPLETE, {"id": job_id})
                row = conn.execute(RUNNABLE).fetchone()
                if not row or row[0] == 0:
                    return
                if time.monotonic() > deadline:
                    raise ToolFailed(f"river: jobs still runnable after {timeout} s")
                if not jobs:
                    time.sleep(0.1)

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with self._connect(url) as conn:
            rows = conn.execute(
                "SELECT id::text, state::text FROM river_job WHERE id = ANY(%s)",
                ([int(i) for i in ids],),
            ).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
