"""pg-boss 10 (npm, Node 20), run with its own client and worker: ``pgboss/boss.js`` in a
node subprocess, JSON on stdout.

Each queue is created with retryLimit 1 and retryDelay 0: a failing job runs twice, then its
state is ``failed`` with ``retry_count`` 1, ``retry_limit`` 1, ``completed_on`` set and
``output`` holding the serialized error (``{"name", "message", "stack"}``). A success is
``completed``. Finished rows stay in ``pgboss.job``: the tools start pg-boss without its
maintenance, so nothing is archived. pg-boss 10 sends no NOTIFY (see ``pgboss/boss.js``):
its workers poll.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import psycopg

from testkit.systems import (
    FAULT_ENV,
    PGBOSS_DIR,
    Enqueued,
    Made,
    ToolFailed,
    made_from,
    node_missing,
    run_tool,
)


class PgBoss:
    name = "pg-boss"
    schema = "pgboss"
    dead_state = "failed"
    ok_state = "completed"

    def _node(self, command: str, arg: Mapping[str, object], *, fault: bool, timeout: float) -> str:
        why = node_missing()
        if why:
            raise ToolFailed(f"pg-boss cannot run here: {why}")
        return run_tool(
            ["node", str(PGBOSS_DIR / "boss.js"), command, json.dumps(arg)],
            env={FAULT_ENV: "1" if fault else "0"},
            timeout=timeout + 10,
            cwd=PGBOSS_DIR,
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
            rows = conn.execute(
                "SELECT id::text, state::text FROM pgboss.job WHERE id = ANY(%s::uuid[])"
                " UNION ALL"
                " SELECT id::text, state::text FROM pgboss.archive WHERE id = ANY(%s::uuid[])",
                (ids, ids),
            ).fetchall()
        found = {str(k): str(v) for k, v in rows}
        return {i: found.get(i) for i in ids}
