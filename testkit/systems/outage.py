"""An outage on a real system, as the journey tests live it: most jobs of one queue died
while a dependency was down, the system's own worker runs in the background the whole
time, and "deploying the fix" restarts that worker with the fault off.

- pg-boss 10, queue ``charges``: each job charges an invoice (``INV-<n>`` in its data)
  through the payments fake, whose API answers the failing ones "503 Service Unavailable
  (request id <random hex>)" while the fault is on; each charge it accepts is a row of
  ``payments.charges`` (``pgboss/boss.js``).
- Procrastinate, queue ``mails``: each job sends one mail (``MSG-<n>``) through the mail
  fake, which refuses the failing ones while the fault is on (Procrastinate keeps no error
  text); each mail it accepts is a row of ``mail_fake.sent`` (``procrastinate_app.py``).

A charge or a mail accepted twice is two rows: ``accepted`` counts them per key, so a test
sees a job that ran to success more than once. ``backdate`` moves the queues' own records
of time back, as if the outage had ended that long ago: queuebot refuses a redrive while
jobs are still dying (the dead letters must not have grown over its window), and a test
does not wait that window out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg

from testkit.systems import (
    FAULT_ENV,
    PGBOSS_DIR,
    ROOT,
    URL_ENV,
    Enqueued,
    Made,
    ToolFailed,
    made_from,
    node_missing,
    python_argv,
)
from testkit.systems.pgboss_system import PgBoss
from testkit.systems.procrastinate_system import APP, Procrastinate


@dataclass(frozen=True)
class Built:
    """What an outage left: per queue the dead and succeeded jobs (``Made``), and each job of
    the outage's queue with its key (the invoice, the message id)."""

    made: Made
    keys: dict[str, str]


class Outage(Protocol):
    preset: str  # queuebot's preset for the system
    queue: str  # the system's queue the outage hit
    dead_state: str
    ok_state: str

    def build(
        self, url: str, *, ok: int, failing: int, others: dict[str, tuple[int, int]]
    ) -> Built:
        """Fill the fresh database at ``url``: the outage's queue with ``ok`` jobs that went
        through and ``failing`` ones that died while the fault was on, and ``others``
        (queue -> (ok, failing)) beside it; the system's own worker settles them all."""
        ...

    def command(self, url: str, *, fault: bool) -> tuple[list[str], dict[str, str], Path]:
        """The system's own long-running worker: argv, environment and folder."""
        ...

    def ready(self, url: str, said: str) -> bool:
        """Whether a worker that printed ``said`` works jobs now."""
        ...

    def accepted(self, url: str) -> Counter[str]:
        """How many times the fake accepted each key."""
        ...

    def backdate(self, url: str, *, minutes: int) -> None:
        """Move the records of time of every job back by ``minutes``."""
        ...

    def rows(self, url: str, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        """Each job's row as the system keeps it (what "untouched" compares)."""
        ...

    def states(self, url: str, ids: list[str]) -> dict[str, str | None]: ...


class Worker:
    """The system's own worker in the background, its output in files under ``folder``."""

    def __init__(self, outage: Outage, url: str, *, fault: bool, folder: Path) -> None:
        argv, env, cwd = outage.command(url, fault=fault)
        folder.mkdir(parents=True, exist_ok=True)
        stamp = f"{'fault' if fault else 'fixed'}-{time.monotonic_ns()}"
        self.out, self.err = folder / f"worker-{stamp}.out", folder / f"worker-{stamp}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=err,
                env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                cwd=cwd,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while not outage.ready(url, self.out.read_text() + self.err.read_text()):
            if self.process.poll() is not None:
                raise ToolFailed(f"the worker exited {self.process.returncode}: {self.said()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ToolFailed(f"the worker did not start in 30 s: {self.said()}")
            time.sleep(0.1)

    def said(self) -> str:
        return f"stdout: {self.out.read_text()[-2000:]}\nstderr: {self.err.read_text()[-4000:]}"

    def stop(self, timeout: float = 30) -> None:
        """Stop it gracefully (what it holds finishes first); it must exit cleanly."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                self.process.kill()
                self.process.wait()
                raise ToolFailed(f"the worker did not stop in {timeout} s: {self.said()}") from exc
        if self.process.returncode not in (0, -signal.SIGTERM):
            raise ToolFailed(f"the worker exited {self.process.returncode}: {self.said()}")


@contextmanager
def worker(outage: Outage, url: str, *, fault: bool, folder: Path) -> Iterator[Worker]:
    running = Worker(outage, url, fault=fault, folder=folder)
    try:
        yield running
    finally:
        running.stop()


class PgBossCharges:
    """pg-boss 10's queue ``charges`` during a payments API outage."""

    preset = "pg-boss"
    queue = "charges"
    dead_state = "failed"
    ok_state = "completed"

    def __init__(self) -> None:
        self.system = PgBoss()

    def build(
        self, url: str, *, ok: int, failing: int, others: dict[str, tuple[int, int]]
    ) -> Built:
        enqueued: Enqueued = {}
        if others:
            spec = {"url": url, "queues": {q: list(c) for q, c in others.items()}}
            enqueued.update(json.loads(self.system._node("build", spec, fault=False, timeout=30)))
        spec_charges = {"url": url, "ok": ok, "failing": failing}
        sent = json.loads(self.system._node("charges", spec_charges, fault=False, timeout=300))
        enqueued[self.queue] = sent["charges"]
        self.system.work(url, fault=True, timeout=600)
        made = made_from(self.system, url, enqueued, self.dead_state, self.ok_state)
        return Built(made, dict(sent["invoices"]))

    def command(self, url: str, *, fault: bool) -> tuple[list[str], dict[str, str], Path]:
        why = node_missing()
        if why:
            raise ToolFailed(f"pg-boss cannot run here: {why}")
        argv = ["node", str(PGBOSS_DIR / "boss.js"), "serve", json.dumps({"url": url})]
        return argv, {FAULT_ENV: "1" if fault else "0"}, PGBOSS_DIR

    def ready(self, url: str, said: str) -> bool:
        return '{"ready":true}' in said

    def accepted(self, url: str) -> Counter[str]:
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT invoice FROM payments.charges").fetchall()
        return Counter(str(r[0]) for r in rows)

    def backdate(self, url: str, *, minutes: int) -> None:
        with psycopg.connect(url) as conn:
            conn.execute(
                "UPDATE pgboss.job SET created_on = created_on - make_interval(mins => %s),"
                " started_on = started_on - make_interval(mins => %s),"
                " completed_on = completed_on - make_interval(mins => %s),"
                " start_after = start_after - make_interval(mins => %s)",
                (minutes,) * 4,
            )

    def rows(self, url: str, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        with psycopg.connect(url) as conn:
            found = conn.execute(
                "SELECT id::text, name, state::text, retry_count, retry_limit, started_on,"
                " completed_on, output::text FROM pgboss.job WHERE id = ANY(%s::uuid[])",
                (ids,),
            ).fetchall()
        return {str(r[0]): tuple(r[1:]) for r in found}

    def states(self, url: str, ids: list[str]) -> dict[str, str | None]:
        return self.system.state_of(url, ids)


CONCURRENCY = 10  # Procrastinate's jobs at once in one worker: a mail waits on its relay


class ProcrastinateMails:
    """Procrastinate's queue ``mails`` while the mail relay was down. ``delete_jobs``: the
    background worker's ``--delete-jobs`` (never, successful, always; unset: its default,
    never); the worker that makes the dead jobs keeps them."""

    preset = "procrastinate"
    queue = "mails"
    dead_state = "failed"
    ok_state = "succeeded"

    def __init__(self, *, delete_jobs: str | None = None) -> None:
        self.system = Procrastinate()
        self.delete_jobs = delete_jobs

    def _python(self, url: str, code: str, *args: str) -> str:
        return self.system._tool(url, "-c", code, *args, timeout=300)

    def build(
        self, url: str, *, ok: int, failing: int, others: dict[str, tuple[int, int]]
    ) -> Built:
        self.system._tool(url, "-m", "procrastinate", f"--app={APP}", "schema", "--apply")
        code = "import sys; from testkit.systems.procrastinate_app import main; main(sys.argv[1:])"
        enqueued: Enqueued = {}
        if others:
            spec = json.dumps({q: list(c) for q, c in others.items()})
            enqueued.update(json.loads(self._python(url, code, "defer", spec)))
        sent = json.loads(
            self._python(url, code, "mails", json.dumps({"ok": ok, "failing": failing}))
        )
        enqueued[self.queue] = sent[self.queue]
        self.system.work(url, fault=True, timeout=600, concurrency=CONCURRENCY)
        made = made_from(self.system, url, enqueued, self.dead_state, self.ok_state)
        return Built(made, dict(sent["keys"]))

    def command(self, url: str, *, fault: bool) -> tuple[list[str], dict[str, str], Path]:
        argv = python_argv(
            "-m",
            "procrastinate",
            "--verbose",
            f"--app={APP}",
            "worker",
            f"--concurrency={CONCURRENCY}",
            # a redriven job sends no NOTIFY: the worker finds it by polling
            "--fetch-job-polling-interval=0.2",
            *([f"--delete-jobs={self.delete_jobs}"] if self.delete_jobs else []),
        )
        return argv, {URL_ENV: url, FAULT_ENV: "1" if fault else "0"}, ROOT

    def ready(self, url: str, said: str) -> bool:
        return "Starting worker" in said or "Waiting for new jobs" in said

    def accepted(self, url: str) -> Counter[str]:
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT message_id FROM mail_fake.sent").fetchall()
        return Counter(str(r[0]) for r in rows)

    def backdate(self, url: str, *, minutes: int) -> None:
        with psycopg.connect(url) as conn:
            conn.execute(
                "UPDATE procrastinate_events SET at = at - make_interval(mins => %s)", (minutes,)
            )
            conn.execute(
                "UPDATE procrastinate_jobs SET scheduled_at = scheduled_at"
                " - make_interval(mins => %s) WHERE scheduled_at IS NOT NULL",
                (minutes,),
            )

    def rows(self, url: str, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        with psycopg.connect(url) as conn:
            found = conn.execute(
                "SELECT j.id::text, j.queue_name, j.status::text, j.attempts, j.scheduled_at,"
                " (SELECT array_agg(e.type::text ORDER BY e.id) FROM procrastinate_events e"
                " WHERE e.job_id = j.id) FROM procrastinate_jobs j WHERE j.id = ANY(%s)",
                ([int(i) for i in ids],),
            ).fetchall()
        return {str(r[0]): tuple(r[1:]) for r in found}

    def states(self, url: str, ids: list[str]) -> dict[str, str | None]:
        return self.system.state_of(url, ids)


def outages() -> list[Outage]:
    return [PgBossCharges(), ProcrastinateMails()]
