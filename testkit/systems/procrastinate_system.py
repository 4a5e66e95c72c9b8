"""Procrastinate 3.x, run with its own tools: the schema by its CLI, jobs deferred by its
client, its own worker (one-shot, in a subprocess) with the fault set by the environment.

Its dead state is status ``failed`` (``attempts`` 2 after two runs); a success is
``succeeded``. Retrying a dead job the way Procrastinate does is its SQL function
``procrastinate_retry_job_v2(id, at, priority, queue, lock)``: status ``todo``, one more
attempt, ``scheduled_at`` set, and its trigger records a ``retried`` event. That update
sends no NOTIFY (its trigger fires on INSERT only), so a worker finds it by polling.
"""

from __future__ import annotations

import json
import time

import psycopg

from testkit.systems import (
    FAULT_ENV,
    URL_ENV,
    Enqueued,
    Made,
    ToolFailed,
    made_from,
    python_argv,
    run_tool,
)

APP = "testkit.systems.procrastinate_app.app"


class Procrastinate:
    name = "procrastinate"
    schema = "public"
    dead_state = "failed"
    ok_state = "succeeded"

    def _tool(self, url: str, *args: str, fault: bool = False, timeout: float = 60) -> str:
        env = {URL_ENV: url, FAULT_ENV: "1" if fault else "0"}
        return run_tool(python_argv(*args), env=env, timeout=timeout)

    def build(self, url: str, *, queues: dict[str, tuple[int, int]]) -> Made:
        self._tool(url, "-m", "procrastinate", f"--app={APP}", "schema", "--apply")
        code = "import sys; from testkit.systems.procrastinate_app import main; main(sys.argv[1:])"
        spec = json.dumps({q: list(counts) for q, counts in queues.items()})
        enqueued: Enqueued = json.loads(self._tool(url, "-c", code, "defer", spec))
        self.work(url, fault=True)
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    def work(
        self, url: str, *, fault: bool = False, timeout: float = 60, concurrency: int = 4
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            self._tool(
                url,
                "-m",
                "procrastinate",
                f"--app={APP}",
                "worker",
                "--one-shot",
                f"--concurrency={concurrency}",
                "--no-listen-notify",
                fault=fault,
                timeout=max(left, 1),
            )
            if not self._runnable(url):
                return
            if time.monotonic() > deadline:
                raise ToolFailed(f"procrastinate: jobs still runnable after {timeout} s")
            time.sleep(0.2)

    def _runnable(self, url: str) -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
            ).fetchone()
        return int(row[0]) if row else 0

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT id::text, status::text FROM procrastinate_jobs WHERE id = ANY(%s)",
                ([int(i) for i in ids],),
            ).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
