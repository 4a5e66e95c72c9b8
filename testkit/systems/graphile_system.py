"""graphile-worker 0.17 (npm, Node 20), run with its own tools: ``graphile/worker.js`` in a
node subprocess (its ``runMigrations``, ``addJob`` and ``runOnce``), JSON on stdout.

Jobs are added with ``queueName`` set to the queue and ``maxAttempts`` 2, task
``send_email``. graphile-worker has no status column: ``state_of`` reads its view
``graphile_worker.jobs`` and names the state the way its columns imply it: ``dead`` where
``attempts >= max_attempts`` (it never takes such a job again), ``locked`` while a worker
holds it, ``failed`` where it failed and will run again (``last_error`` set), ``waiting``
otherwise. A job that succeeds is DELETEd, so an ok job's state is None.

Its retry of a dead job is its SQL function ``graphile_worker.reschedule_jobs(job_ids,
run_at, priority, attempts, max_attempts)``, which skips locked jobs (see test_systems.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import psycopg

from testkit.systems import (
    FAULT_ENV,
    GRAPHILE_DIR,
    Enqueued,
    Made,
    ToolFailed,
    made_from,
    node_missing,
    run_tool,
)

PACKAGE = "graphile-worker"

STATE = """
SELECT id::text,
       CASE WHEN attempts >= max_attempts THEN 'dead'
            WHEN locked_at IS NOT NULL THEN 'locked'
            WHEN last_error IS NOT NULL THEN 'failed'
            ELSE 'waiting' END
FROM graphile_worker.jobs WHERE id = ANY(%s)
"""


def graphile_missing() -> str | None:
    """Why graphile-worker cannot run here, or None when it can."""
    return node_missing(GRAPHILE_DIR, PACKAGE)


class GraphileWorker:
    name = "graphile-worker"
    schema = "graphile_worker"
    dead_state = "dead"
    ok_state: str | None = None  # a success deletes the job

    def _node(self, command: str, arg: Mapping[str, object], *, fault: bool, timeout: float) -> str:
        why = graphile_missing()
        if why:
            raise ToolFailed(f"graphile-worker cannot run here: {why}")
        return run_tool(
            ["node", str(GRAPHILE_DIR / "worker.js"), command, json.dumps(arg)],
            env={FAULT_ENV: "1" if fault else "0"},
            timeout=timeout + 10,
            cwd=GRAPHILE_DIR,
        )

    def build(self, url: str, *, queues: dict[str, tuple[int, int]]) -> Made:
        spec = {"url": url, "queues": {q: list(counts) for q, counts in queues.items()}}
        enqueued: Enqueued = json.loads(self._node("build", spec, fault=False, timeout=30))
        self.work(url, fault=True)
        return made_from(self, url, enqueued, self.dead_state, self.ok_state)

    def work(self, url: str, *, fault: bool = False, timeout: float = 60) -> None:
        self._node("work", {"url": url, "timeout": timeout}, fault=fault, timeout=timeout)

    def state_of(self, url: str, ids: list[str]) -> dict[str, str | None]:
        with psycopg.connect(url) as conn:
            rows = conn.execute(STATE, ([int(i) for i in ids],)).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
