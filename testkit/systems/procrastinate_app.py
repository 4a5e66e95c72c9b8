"""The Procrastinate app the preset tests run: one task that fails on demand.

``send`` raises when its argument ``fail`` is true and the environment has
``QB_SYSTEMS_FAULT=1``. Its retry strategy grants one retry with no wait, so a failing job
runs twice and is then dead (status ``failed``, ``attempts`` 2): Procrastinate's
``max_attempts`` counts retries, not runs.

The database comes from ``QB_SYSTEMS_URL`` (a libpq URL), read when this module is
imported: the tools run it in a subprocess per database. ``main(["defer", SPEC])`` defers
jobs and prints their ids as JSON, SPEC being ``{"queue": [ok, failing], ...}``.
"""

from __future__ import annotations

import json
import os
import sys

import procrastinate

FAULT_ENV = "QB_SYSTEMS_FAULT"
URL_ENV = "QB_SYSTEMS_URL"
TASK = "queuebot_tests.send"

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(URL_ENV, "")),
)


@app.task(name=TASK, retry=procrastinate.RetryStrategy(max_attempts=1, wait=0))
def send(fail: bool = False, n: int = 0) -> None:
    if fail and os.environ.get(FAULT_ENV) == "1":
        raise TimeoutError(f"smtp relay did not answer in 30 s (job {n})")


def defer(spec: dict[str, list[int]]) -> dict[str, dict[str, list[str]]]:
    """Defer ``ok`` then ``failing`` jobs per queue; their ids per queue."""
    out: dict[str, dict[str, list[str]]] = {}
    with app.open():
        for queue, (ok, failing) in spec.items():
            task = send.configure(queue=queue)
            ids: dict[str, list[str]] = {"ok": [], "failing": []}
            for n in range(ok + failing):
                kind = "ok" if n < ok else "failing"
                ids[kind].append(str(task.defer(fail=kind == "failing", n=n)))
            out[queue] = ids
    return out


def main(argv: list[str]) -> None:
    """``defer SPEC``: defer the jobs SPEC names and print their ids as JSON."""
    if argv[:1] != ["defer"] or len(argv) != 2:
        sys.exit("usage: defer SPEC")
    print(json.dumps(defer(json.loads(argv[1]))))
