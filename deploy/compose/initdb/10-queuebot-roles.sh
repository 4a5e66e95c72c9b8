#!/usr/bin/env bash
# PostgreSQL's first start (the postgres image runs /docker-entrypoint-initdb.d/* once, on
# an empty data directory): the two roles queuebot is run as, and an example queue table.
#
#   queuebot_owner    owns queuebot's tables: `queuebot db upgrade` and `queuebot db grant
#                     queuebot_runtime --apply` run as it (the compose service `migrate`)
#   queuebot_runtime  what `queuebot serve` runs as; it owns nothing, so it cannot disable
#                     the audit trail's triggers (docs/audit.md, "Least privilege")
#
# The passwords come from the environment (deploy/compose/postgres.env); the same ones
# must be in the database URLs of deploy/compose/migrate.env and queuebot.env.
# QUEUEBOT_OWNER_ROLE and QUEUEBOT_RUNTIME_ROLE rename the roles (the test of this script
# uses names of its own).
set -euo pipefail

owner="${QUEUEBOT_OWNER_ROLE:-queuebot_owner}"
runtime="${QUEUEBOT_RUNTIME_ROLE:-queuebot_runtime}"
: "${QUEUEBOT_OWNER_PASSWORD:?set QUEUEBOT_OWNER_PASSWORD (deploy/compose/postgres.env)}"
: "${QUEUEBOT_RUNTIME_PASSWORD:?set QUEUEBOT_RUNTIME_PASSWORD (deploy/compose/postgres.env)}"
database="${POSTGRES_DB:-postgres}"
# The worker_queue profile's table as queuebot ships it, created empty: a queue for the
# stack to serve out of the box. Leave the file out to skip it.
queue_ddl="${QUEUEBOT_QUEUE_DDL:-/queuebot/worker_queue.sql}"

sql() {
  psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet --username "${POSTGRES_USER:-postgres}" \
    --dbname "$database" "$@"
}

# Passwords go in as psql variables (:'name' quotes them as literals), never in the SQL text.
sql -v owner="$owner" -v runtime="$runtime" \
  -v owner_password="$QUEUEBOT_OWNER_PASSWORD" \
  -v runtime_password="$QUEUEBOT_RUNTIME_PASSWORD" <<'SQL'
CREATE ROLE :"owner" LOGIN PASSWORD :'owner_password';
CREATE ROLE :"runtime" LOGIN PASSWORD :'runtime_password';
-- The owner creates queuebot's tables in the public schema (PostgreSQL 15 and later no
-- longer let every role create there).
GRANT CREATE, USAGE ON SCHEMA public TO :"owner";
GRANT USAGE ON SCHEMA public TO :"runtime";
SELECT format('GRANT CONNECT ON DATABASE %I TO %I, %I', current_database(), :'owner', :'runtime')
\gexec
SQL

if [ -f "$queue_ddl" ]; then
  sql --file "$queue_ddl"
  # The queue's table belongs to its team (here the superuser). The runtime role reads it,
  # changes its rows' status (requeue, cancel, redrive) and lets housekeeping delete old
  # stale duplicates (docs/housekeeping.md, Part C).
  sql -v runtime="$runtime" <<'SQL'
GRANT SELECT, UPDATE, DELETE ON TABLE dev_r_worker_queue TO :"runtime";
SQL
fi
