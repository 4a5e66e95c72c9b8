-- worker_queue estate for SQLite: timestamps are stored as
-- 'YYYY-MM-DD HH:MM:SS.ffffff' UTC text, the format SQLAlchemy writes.
CREATE TABLE IF NOT EXISTS dev_r_worker_queue (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  issue_number        INTEGER,
  github_issue_number INTEGER,
  job_type            TEXT NOT NULL,
  status              TEXT NOT NULL DEFAULT 'queued' CHECK (status IN (
                        'queued', 'claimed', 'running', 'done', 'failed', 'cancelled',
                        'failed_permanently')),
  failure_reason      TEXT CHECK (failure_reason IN (
                        'implementation_error', 'timeout', 'stale_duplicate', 'spawn_oom',
                        'spawn_ram', 'mutex_collision', 'other')),
  error_message       TEXT,
  retry_count         INTEGER NOT NULL DEFAULT 0,
  max_retries         INTEGER NOT NULL DEFAULT 3,
  queued_at           DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  next_attempt_at     DATETIME,
  server_node         TEXT,
  server_preference   TEXT,
  claimed_at          DATETIME,
  started_at          DATETIME,
  heartbeat_at        DATETIME,
  analyst_notes       TEXT,
  payload             JSON                 -- the job's arguments (JSON text)
);
