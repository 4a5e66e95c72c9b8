"""Real job-queue systems, built, filled and run in a fresh PostgreSQL database.

Tests of queuebot's presets need real dead jobs made by each system's own tools, and need
to run the system's own worker again after queuebot redrove them. Each system here has
the same shape (``System``): ``build`` makes its schema, enqueues jobs (some failing) and
runs its worker with the fault on until the failing ones are dead; ``work`` runs its
worker again (the fault off by default) until nothing is runnable; ``state_of`` reads
each job's state as the system writes it.

- Procrastinate (PyPI): its own CLI and worker, in subprocesses (``procrastinate_app``).
- pg-boss 10 (npm, Node 20): its own client and worker, in node subprocesses (``pgboss/``).
- graphile-worker 0.17 (npm, Node 20): its own migrations, client and worker, in node
  subprocesses (``graphile/``).
- River, Oban, GoodJob, Solid Queue and Que cannot run here (Go, Elixir, Ruby): their
  tables are made from the facts of their schemas, and a stand-in worker claims and
  settles jobs the way each does.

Failing jobs carry the argument ``{"fail": true}``; a worker raises for them only while
the fault is on (the environment variable ``QB_SYSTEMS_FAULT=1`` for the real workers).
Every system retries a failing job once: two attempts, then it is dead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FAULT_ENV = "QB_SYSTEMS_FAULT"
URL_ENV = "QB_SYSTEMS_URL"
MAX_ATTEMPTS = 2  # every system here: a failing job runs twice, then it is dead
FAULT_MESSAGE = "TimeoutError: smtp relay did not answer in 30 s"


@dataclass(frozen=True)
class Made:
    """What ``System.build`` made: per queue, the ids of the jobs now dead (in the system's
    own dead state) and of those that succeeded (their rows may be gone where the system
    deletes successes). Where a retry makes a new row (Solid Queue), a dead id is the
    job's last row."""

    dead: dict[str, list[str]] = field(default_factory=dict)
    ok: dict[str, list[str]] = field(default_factory=dict)


class System(Protocol):
    name: str  # "procrastinate", "pg-boss", "river", "oban", "graphile-worker", ...
    schema: str  # the PostgreSQL schema its tables live in

    def build(self, url: str, *, queues: dict[str, tuple[int, int]]) -> Made:
        """In the existing database at the libpq ``url``: make the schema with the system's
        own tool, enqueue per queue ``(ok, failing)`` jobs with its own client and run its
        worker with the fault on until every failing job is dead and every ok one
        succeeded."""
        ...

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        """Run the system's own worker until no job is runnable, then stop it."""
        ...

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        """Each job's state as the system writes it (None where the row is gone)."""
        ...


class ToolFailed(RuntimeError):
    """A system's tool failed or did not finish in time."""


def run_tool(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    cwd: Path = ROOT,
    stdin: str | None = None,
) -> str:
    """Run one of a system's tools; its stdout, or an error carrying its output."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ToolFailed(f"{argv[:3]} did not finish in {timeout} s: {exc.stderr!r}") from exc
    if done.returncode != 0:
        raise ToolFailed(
            f"{argv[:3]} exited {done.returncode}\nstdout: {done.stdout[-4000:]}\n"
            f"stderr: {done.stderr[-4000:]}"
        )
    return done.stdout


def python_argv(*args: str) -> list[str]:
    return [sys.executable, *args]


PGBOSS_DIR = HERE / "pgboss"
GRAPHILE_DIR = HERE / "graphile"


NODE_MAJOR = 20  # pg-boss 10's engines: node >= 20; graphile-worker 0.17 runs on it too


def node_missing(folder: Path = PGBOSS_DIR, package: str = "pg-boss") -> str | None:
    """Why the npm ``package`` installed in ``folder`` cannot run here, or None when it can."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (Debian's nodejs package)"
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    major = version.lstrip("v").split(".")[0]
    if not major.isdigit() or int(major) < NODE_MAJOR:
        return f"node {version or '?'} is older than {package} needs here ({NODE_MAJOR})"
    if not (folder / "node_modules" / package).is_dir():
        if shutil.which("npm") is None:
            return f"npm is not installed, so {package} cannot be installed"
        return f"{package} is not installed: run npm ci --prefix {folder.relative_to(ROOT)}"
    return None


def all_systems() -> list[System]:
    from testkit.systems.good_job import GoodJob
    from testkit.systems.graphile_system import GraphileWorker
    from testkit.systems.oban import Oban
    from testkit.systems.pgboss_system import PgBoss
    from testkit.systems.procrastinate_system import Procrastinate
    from testkit.systems.que import Que
    from testkit.systems.river import River
    from testkit.systems.solid_queue import SolidQueue

    return [
        Procrastinate(),
        PgBoss(),
        River(),
        Oban(),
        GraphileWorker(),
        GoodJob(),
        SolidQueue(),
        Que(),
    ]


def systems_available() -> dict[str, str | None]:
    """Each system's name -> None when it can run here, else why not."""
    why: dict[str, str | None] = {}
    try:
        import procrastinate  # noqa: F401

        why["procrastinate"] = None
    except ImportError:
        why["procrastinate"] = "the procrastinate package is not installed (the test extra)"
    why["pg-boss"] = node_missing()
    why["river"] = None
    why["oban"] = None
    why["graphile-worker"] = node_missing(GRAPHILE_DIR, "graphile-worker")
    why["good_job"] = None
    why["solid_queue"] = None
    why["que"] = None
    return why


Enqueued = dict[str, dict[str, list[str]]]  # queue -> {"ok": ids, "failing": ids}


def made_from(system: System, url: str, enqueued: Enqueued, dead: str, ok: str | None) -> Made:
    """``Made`` from what was enqueued, after checking that every failing job is in the
    system's dead state ``dead`` and every ok one in ``ok`` (or gone; ``ok`` is None where
    the system deletes a job that succeeds)."""
    ids = [i for q in enqueued.values() for kind in ("ok", "failing") for i in q[kind]]
    states = system.state_of(url, ids)
    wrong = {
        i: states[i]
        for q in enqueued.values()
        for kind, want in (("ok", ok), ("failing", dead))
        for i in q[kind]
        if states[i] != want and not (kind == "ok" and states[i] is None)
    }
    if wrong:
        raise ToolFailed(f"{system.name}: jobs not settled as expected: {wrong}")
    return Made(
        dead={name: list(q["failing"]) for name, q in enqueued.items()},
        ok={name: list(q["ok"]) for name, q in enqueued.items()},
    )
