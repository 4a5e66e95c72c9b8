-- worker_queue estate: one table, dev_r_worker_queue.
-- failure_reason is a PostgreSQL enum, as on the worker estates it models.
DO $$ BEGIN
  CREATE TYPE worker_failure_reason AS ENUM (
    'implementation_error', 'timeout', 'stale_duplicate', 'spawn_oom', 'spawn_ram',
    'mutex_collision', 'other');
EXCEPTION WHEN duplicate_object THEN NULL; END $$;

CREATE TABLE IF NOT EXISTS dev_r_worker_queue (
  id                  BIGSERIAL PRIMARY KEY,
  issue_number        INTEGER,
  github_issue_number INTEGER,
  job_type            TEXT NOT NULL,
  status              TEXT NOT NULL DEFAULT 'queued' CHECK (status IN (
                        'queued', 'claimed', 'running', 'done', 'failed', 'cancelled',
                        'failed_permanently')),
  failure_reason      worker_failure_reason,
  error_message       TEXT,
  retry_count         INTEGER NOT NULL DEFAULT 0,
  max_retries         INTEGER NOT NULL DEFAULT 3,
  queued_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
  next_attempt_at     TIMESTAMPTZ,
  server_node         TEXT,
  server_preference   TEXT,
  claimed_at          TIMESTAMPTZ,
  started_at          TIMESTAMPTZ,
  heartbeat_at        TIMESTAMPTZ,
  analyst_notes       TEXT,
  payload             JSONB                -- the job's arguments
);
