-- message_job estate for SQLite: ids are UUID text, timestamps UTC text.
CREATE TABLE IF NOT EXISTS video_assets (
  id                TEXT PRIMARY KEY,
  tenant_id         TEXT NOT NULL,
  source_object_key TEXT,
  status            TEXT NOT NULL,
  created_at        DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE TABLE IF NOT EXISTS clip_jobs (
  id               TEXT PRIMARY KEY,
  asset_id         TEXT NOT NULL REFERENCES video_assets (id),
  tenant_id        TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN (
                     'QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCEL_REQUESTED',
                     'CANCELLED')),
  attempt_count    INTEGER NOT NULL DEFAULT 0,
  progress_percent INTEGER NOT NULL DEFAULT 0,
  error_message    TEXT,
  created_at       DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  started_at       DATETIME,
  finished_at      DATETIME,
  payload          JSON                 -- the clip job's arguments (JSON text)
);

CREATE TABLE IF NOT EXISTS queue_messages (
  id            TEXT PRIMARY KEY,
  job_id        TEXT NOT NULL REFERENCES clip_jobs (id),
  status        TEXT NOT NULL CHECK (status IN ('PENDING', 'PROCESSING', 'COMPLETED', 'DLQ')),
  attempt_count INTEGER NOT NULL DEFAULT 0,
  available_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  claimed_at    DATETIME,
  last_error    TEXT
);

CREATE TABLE IF NOT EXISTS job_events (
  id           TEXT PRIMARY KEY,
  aggregate_id TEXT NOT NULL,
  event_type   TEXT NOT NULL,
  message      TEXT,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
