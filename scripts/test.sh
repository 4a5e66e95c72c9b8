#!/usr/bin/env bash
# Install queuebot with its test extras into ./.venv and run every check CI runs:
# ruff, mypy, the layering contract, then the test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports
.venv/bin/pytest "$@"
