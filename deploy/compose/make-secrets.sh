#!/usr/bin/env bash
# The secrets deploy/compose.yaml mounts, made once in deploy/compose/secrets/ (run it from
# anywhere; it works beside itself):
#
#   bash deploy/compose/make-secrets.sh
#
# Made here, at random: postgres-password, owner-password, runtime-password, audit-key
# (openssl rand -hex 32) and alert-token (openssl rand -hex 16); and from the two role
# passwords, owner-database-url and runtime-database-url. A file already there is kept, so
# running it again changes nothing (change a password with ALTER ROLE ... PASSWORD and
# write the file and its URL yourself). Left for you, since only you have them:
# slack-bot-token, slack-signing-secret and paging-routing-key; the script says how.
#
# The folder is 0700 (on the host, root's alone); each file is 0444, so that inside the
# containers each service's user (queuebot's 10001, PostgreSQL's, Alertmanager's nobody)
# reads the files Compose gives it. No secret is printed.
set -euo pipefail
umask 077
here="$(cd "$(dirname "$0")" && pwd)"
dir="${QUEUEBOT_SECRETS_DIR:-$here/secrets}"
mkdir -p "$dir"
chmod 0700 "$dir"

made=()
make() { # NAME VALUE: write the file unless it is there
  local path="$dir/$1"
  if [ ! -e "$path" ]; then
    printf '%s\n' "$2" >"$path"
    made+=("$1")
  fi
  chmod 0444 "$path"
}
value() { tr -d '\r\n' <"$dir/$1"; }

make postgres-password "$(openssl rand -hex 24)"
make owner-password "$(openssl rand -hex 24)"
make runtime-password "$(openssl rand -hex 24)"
make owner-database-url "postgresql://queuebot_owner:$(value owner-password)@postgres:5432/jobs"
make runtime-database-url \
  "postgresql://queuebot_runtime:$(value runtime-password)@postgres:5432/jobs"
make audit-key "$(openssl rand -hex 32)"
make alert-token "$(openssl rand -hex 16)"

echo "make-secrets: ${#made[@]} made in $dir${made[*]:+: ${made[*]}}"
missing=()
for name in slack-bot-token slack-signing-secret paging-routing-key; do
  [ -s "$dir/$name" ] || missing+=("$name")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "make-secrets: still to write (typed, not echoed), then chmod 0444:"
  for name in "${missing[@]}"; do
    echo "  read -rsp '$name: ' v && printf '%s\\n' \"\$v\" > $dir/$name && chmod 0444 $dir/$name"
  done
fi
