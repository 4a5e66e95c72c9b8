#!/usr/bin/env bash
# Install queuebot with its test extras into ./.venv and run every check CI runs:
# ruff, mypy, the layering contract, then the whole test suite in parallel (pytest-xdist,
# QUEUEBOT_TEST_WORKERS workers, 4 by default: most tests wait on databases and processes,
# so four share two cores well). Extra arguments go to pytest.
#
#   ./scripts/test.sh            everything CI runs
#   ./scripts/test.sh --quick    the inner loop: tests/unit and tests/integration, without
#                                the slow and alerting marks (no tests/e2e, no reliability
#                                suite); under 2 minutes on two cores
set -euo pipefail
cd "$(dirname "$0")/.."
# Install when the venv is new or pyproject.toml changed since the last install.
stamp=.venv/.queuebot-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
# pg-boss and graphile-worker for testkit/systems (Node): install each folder when its
# node_modules is missing or its lock file changed since, only where npm exists (their
# tests skip without it, outside CI).
if command -v npm >/dev/null 2>&1; then
  for folder in testkit/systems/pgboss testkit/systems/graphile; do
    if [ ! -f "$folder/node_modules/.queuebot-installed" ] \
      || [ "$folder/package-lock.json" -nt "$folder/node_modules/.queuebot-installed" ]; then
      npm ci --prefix "$folder" --no-audit --no-fund --loglevel=error
      touch "$folder/node_modules/.queuebot-installed"
    fi
  done
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports
# The tests' databases are scratch, made and dropped per test: their sessions (the tests'
# and every process a test starts) do not wait for each commit's WAL to reach the disk
# (synchronous_commit=off, through libpq's PGOPTIONS). Only a crash of PostgreSQL itself
# could lose their last commits, which no test does; a benchmark run by hand keeps the defaults.
export PGOPTIONS="${PGOPTIONS:+$PGOPTIONS }-c synchronous_commit=off"
workers=(-n "${QUEUEBOT_TEST_WORKERS:-4}")
if [ "${1:-}" = "--quick" ]; then
  shift
  exec .venv/bin/pytest "${workers[@]}" -m "not slow and not alerting" \
    tests/unit tests/integration "$@"
fi
exec .venv/bin/pytest "${workers[@]}" "$@"
