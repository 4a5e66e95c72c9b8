#!/usr/bin/env bash
# Build the queuebot image without an image registry, and with no network during the build:
#
#   scripts/image.sh [TAG]        builds queuebot:TAG (default: queuebot:latest)
#
# 1. wheelhouse/: queuebot and every dependency as wheels (pip wheel), pinned to the
#    versions the development venv has (PYTHON, default .venv/bin/python; it must be
#    CPython 3.11, the image's Python). Without PYTHON, a .venv that is missing (a fresh
#    clone) or older than pyproject.toml is made first, as scripts/test.sh makes it
#    (python3.11, else python3, -m venv .venv; queuebot installed editable with [test]).
# 2. The base: $BASE when set; else python:3.11-slim when that image is here already; else
#    queuebot-base:bookworm, made once with debootstrap from Debian's mirror (minbase with
#    python3, python3-venv and ca-certificates, trimmed) and reused after. debootstrap
#    needs root: run this as root (CI does) when that base is to be made.
# 3. docker build --network none, installing from wheelhouse/ only.
#
# Prints the image's size and the build's time. DEBIAN_MIRROR overrides the mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
# One run at a time in this tree (it rebuilds wheelhouse/ in place): a second one waits.
exec 9<scripts/image.sh
flock 9

tag="${1:-latest}"
image="queuebot:$tag"
python="${PYTHON:-.venv/bin/python}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
debian_base="queuebot-base:bookworm"
started=$(date +%s.%N)

say() { echo "image: $*"; }
seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# The development venv, when no PYTHON is named: made when it is new or pyproject.toml
# changed since its last install, exactly as scripts/test.sh does (the same stamp, so
# either script leaves it ready for the other).
stamp=.venv/.queuebot-installed
if [ -z "${PYTHON:-}" ] && { [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; }; then
  base_python=$(command -v python3.11 || command -v python3 || true)
  if [ -z "$base_python" ]; then
    echo "image: no .venv and no python3 to make it with (set PYTHON to a Python 3.11)" >&2
    exit 2
  fi
  if [ -x .venv/bin/python ]; then
    say "updating .venv (pyproject.toml changed since its last install)"
  else
    say "no .venv yet: making it as scripts/test.sh does, with $base_python"
  fi
  "$base_python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi

if [ ! -x "$python" ] && ! command -v "$python" >/dev/null 2>&1; then
  echo "image: no Python at $python (set PYTHON to the venv's python)" >&2
  exit 2
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$version" != "3.11" ]; then
  echo "image: $python is Python $version; the wheels must be for the image's 3.11" >&2
  exit 2
fi
docker info >/dev/null 2>&1 || { echo "image: no Docker engine answers" >&2; exit 2; }

work=$(mktemp -d /tmp/queuebot-image.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT

# 1. The wheels, pinned to what the venv resolved (queuebot itself, installed editable
#    there, is left out of the pins). queuebot's wheel is built from a copy of the sources,
#    so no stale build/ in the tree leaks into it, with its files dated by the last commit:
#    the same sources make the same wheel, and docker build reuses its cached layers.
say "wheels into wheelhouse/"
rm -rf wheelhouse
mkdir -p wheelhouse "$work/src"
# Only what the package holds (pyproject.toml leaves testkit/ and tests/ out of it).
cp -R pyproject.toml README.md bot commands services "$work/src/"
find "$work/src" \( -name __pycache__ -o -name node_modules \) -prune -exec rm -rf {} +
"$python" -m pip freeze --exclude-editable --exclude queuebot >"$work/pins.txt"
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
  "$python" -m pip wheel --quiet --disable-pip-version-check -w wheelhouse \
  -c "$work/pins.txt" "$work/src"
say "$(find wheelhouse -name '*.whl' | wc -l) wheels, $(du -sh wheelhouse | cut -f1)"

# 2. The base image.
if [ -z "${BASE:-}" ]; then
  if docker image inspect python:3.11-slim >/dev/null 2>&1; then
    BASE=python:3.11-slim
  else
    BASE="$debian_base"
    if docker image inspect "$BASE" >/dev/null 2>&1; then
      say "base $BASE (made earlier, reused)"
    else
      if [ "$(id -u)" != 0 ]; then
        echo "image: making $BASE with debootstrap needs root (or set BASE)" >&2
        exit 2
      fi
      say "making $BASE with debootstrap from $mirror"
      base_started=$(date +%s.%N)
      root="$work/rootfs"
      debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
      # Trimmed: package lists and caches, documentation (the copyright files stay), man
      # and info pages, translations, logs.
      rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
        "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale \
        "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache
      find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
      find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
      tar -C "$root" -c . | docker import - "$BASE" >/dev/null
      rm -rf --one-file-system "$root"
      say "base $BASE made in $(seconds_since "$base_started") s"
    fi
  fi
fi

# 3. The image, from the wheels only.
say "building $image on $BASE"
build_started=$(date +%s.%N)
docker build --network none --build-arg "BASE=$BASE" -t "$image" . >"$work/build.log" 2>&1 \
  || { tail -n 40 "$work/build.log" >&2; exit 1; }
build_seconds=$(seconds_since "$build_started")
size=$(docker image inspect -f '{{.Size}}' "$image")
say "$image: $((size / 1000000)) MB; docker build ${build_seconds} s, all $(seconds_since "$started") s"
