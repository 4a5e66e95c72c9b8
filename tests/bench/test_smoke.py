"""Every bench runs at its ``--smoke`` size, as ``python -m bench.NAME --smoke`` from the
repository's root: it exits 0 and prints its figures (at that size no target is judged).
A bench is a module of bench/ that runs as a program; each must name a figure it prints
below.

The benches on PostgreSQL take ``QUEUEBOT_TEST_POSTGRES`` as their admin URL and make and
drop databases of their own; skipped when it cannot be reached, unless
``QUEUEBOT_REQUIRE_POSTGRES=1`` (CI). ``bench.presets`` runs every real queue system's
schema: skipped where one cannot run here (node and npm for pg-boss and graphile-worker),
unless ``QUEUEBOT_REQUIRE_SYSTEMS=1``. ``bench.partition`` makes a network namespace: it
runs only as root where one can be made. Marked slow: the full suite runs them, the quick
inner loop does not.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.systems import systems_available
from tests.conftest import PG_ADMIN, need_postgres

ROOT = Path(__file__).resolve().parents[2]
# The longest first, so that under -n the workers finish together.
LONGEST = ("presets", "storm", "alerts", "scheduler", "slack_ack", "discord_first_response")
BENCHES = sorted(
    (
        path.stem
        for path in (ROOT / "bench").glob("*.py")
        if 'if __name__ == "__main__":' in path.read_text()
    ),
    key=lambda name: (LONGEST.index(name) if name in LONGEST else len(LONGEST), name),
)
# A figure each bench prints, as a line of its output shows it.
FIGURES = {
    "alerts": r"latency per request \(client side\): p50 [\d.]+ ms",
    "authorization": r"authorization added \(p99, groups - people\): -?[\d.]+ ms",
    "board": r"board \(read and words\), \d+ runs: p50 [\d.]+ ms",
    "discord_first_response": r"first response ms: p50 \d+",
    "home": r"home \(read and rendered to the view\), \d+ runs: p50 [\d.]+ ms",
    "housekeep": r"first run +\d+ ms +\d+ statements",
    "metrics": r"scrape within the interval \(cached\): +p50 +[\d.]+ ms",
    "own_metrics": r"first reading \(every ended plan counted once\): +[\d.]+ ms",
    "partition": r"queuebot\tidle\t",
    "presets": r"queuebot as a share of the bare retry \(bare / queuebot\): [\d.]+%",
    "redrive": r"median queuebot: +[\d.]+ s +-> +[\d,]+ jobs/s",
    "redrive_plan": r"plan overhead \(all ticks, real time\): [\d.]+ s",
    "retention": r"db prune on postgresql: [\d,]+ old delivery keys removed",
    "scheduler": r"lag \(committed - due\): +p50 +[\d.]+ ms",
    "signatures": r"cold: +now [\d.]+ us/text",
    "slack_ack": r"ack +\(send -> HTTP 200\) +p50 [\d.]+ ms",
    "storm": r"reminders and escalations: +p50 [\d.]+ s",
    "triage": r"worker_queue +indexes +triage p95 +[\d.]+ ms",
}
# SQLite, or no database
WITHOUT_POSTGRES = {"signatures", "discord_first_response", "authorization"}
REQUIRE_SYSTEMS = os.environ.get("QUEUEBOT_REQUIRE_SYSTEMS") == "1"


def test_every_bench_names_a_figure() -> None:
    assert sorted(FIGURES) == sorted(BENCHES)


def need_systems() -> None:
    missing = {name: why for name, why in systems_available().items() if why}
    if missing and REQUIRE_SYSTEMS:
        pytest.fail(f"queue systems required (QUEUEBOT_REQUIRE_SYSTEMS=1) but: {missing}")
    if missing:
        pytest.skip(f"queue systems cannot run here: {missing}")


def need_network_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("bench.partition needs root and ip (a network namespace)")
    probe = f"qbsmoke{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"no network namespace can be made here: {made.stderr.decode().strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=() if name in WITHOUT_POSTGRES else pytest.mark.postgres)
        for name in BENCHES
    ],
)
def test_bench_runs_at_its_smoke_size(name: str) -> None:
    url: list[str] = []
    if name not in WITHOUT_POSTGRES:
        need_postgres()
        url = ["--url", PG_ADMIN]
    if name == "presets":
        need_systems()
    if name == "partition":
        need_network_namespaces()
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--smoke", *url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, said
    assert re.search(FIGURES[name], done.stdout), said
