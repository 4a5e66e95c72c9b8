#!/usr/bin/env bash
# PostgreSQL's first start (the postgres image runs /docker-entrypoint-initdb.d/* once, on
# an empty data directory): the two roles queuebot is run as, and an example queue table.
#
#   queuebot_owner    owns queuebot's tables: `queuebot db upgrade` and `queuebot db grant
#                     queuebot_runtime --apply` run as it (the compose service `migrate`)
#   queuebot_runtime  what `queuebot serve` runs as; it owns nothing, so it cannot disable
#                     the audit trail's triggers (docs/audit.md, "Least privilege")
#
# The passwords come from the files QUEUEBOT_OWNER_PASSWORD_FILE and
# QUEUEBOT_RUNTIME_PASSWORD_FILE name (deploy/compose.yaml mounts the secrets
# owner-password and runtime-password), or from QUEUEBOT_OWNER_PASSWORD and
# QUEUEBOT_RUNTIME_PASSWORD themselves; the same ones must be in the database URLs of the
# secrets owner-database-url and runtime-database-url (deploy/compose/make-secrets.sh
# writes both). QUEUEBOT_OWNER_ROLE and QUEUEBOT_RUNTIME_ROLE rename the roles (the test of
# this script uses names of its own).
set -euo pipefail

# NAME from the file NAME_FILE names (its trailing newline dropped), as the postgres
# image reads POSTGRES_PASSWORD_FILE; both set is an error.
from_file() {
  local name="$1" file_var="${1}_FILE"
  if [ -n "${!file_var:-}" ]; then
    if [ -n "${!name:-}" ]; then
      echo "10-queuebot-roles.sh: both $name and $file_var are set; set one" >&2
      exit 1
    fi
    if [ ! -r "${!file_var}" ] || [ ! -s "${!file_var}" ]; then
      echo "10-queuebot-roles.sh: $file_var = ${!file_var}: cannot read the file, or it is empty" >&2
      exit 1
    fi
    printf -v "$name" '%s' "$(cat "${!file_var}")"
  fi
}
from_file QUEUEBOT_OWNER_PASSWORD
from_file QUEUEBOT_RUNTIME_PASSWORD

owner="${QUEUEBOT_OWNER_ROLE:-queuebot_owner}"
runtime="${QUEUEBOT_RUNTIME_ROLE:-queuebot_runtime}"
: "${QUEUEBOT_OWNER_PASSWORD:?set QUEUEBOT_OWNER_PASSWORD_FILE (the secret owner-password)}"
: "${QUEUEBOT_RUNTIME_PASSWORD:?set QUEUEBOT_RUNTIME_PASSWORD_FILE (the secret runtime-password)}"
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
