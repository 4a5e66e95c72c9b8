-- message_job estate: queue_messages + clip_jobs + job_events + video_assets.
-- job_events.id has no default: the team's own redrive SQL supplies it, and so does queuebot.
CREATE TABLE IF NOT EXISTS video_assets (
  id                UUID PRIMARY KEY,
  tenant_id         TEXT NOT NULL,
  source_object_key TEXT,
  status            TEXT NOT NULL,
  created_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS clip_jobs (
  id               UUID PRIMARY KEY,
  asset_id         UUID NOT NULL REFERENCES video_assets (id),
  tenant_id        TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN (
                     'QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCEL_REQUESTED',
                     'CANCELLED')),
  attempt_count    INTEGER NOT NULL DEFAULT 0,
  progress_percent INTEGER NOT NULL DEFAULT 0,
  error_message    TEXT,
  created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
  started_at       TIMESTAMPTZ,
  finished_at      TIMESTAMPTZ,
  payload          JSONB                -- the clip job's arguments
);

CREATE TABLE IF NOT EXISTS queue_messages (
  id            UUID PRIMARY KEY,
  job_id        UUID NOT NULL REFERENCES clip_jobs (id),
  status        TEXT NOT NULL CHECK (status IN ('PENDING', 'PROCESSING', 'COMPLETED', 'DLQ')),
  attempt_count INTEGER NOT NULL DEFAULT 0,
  available_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  claimed_at    TIMESTAMPTZ,
  last_error    TEXT
);

CREATE TABLE IF NOT EXISTS job_events (
  id           UUID PRIMARY KEY,
  aggregate_id UUID NOT NULL,
  event_type   TEXT NOT NULL,
  message      TEXT,
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
