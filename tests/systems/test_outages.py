"""The outages the journey tests live through (testkit/systems/outage.py) are what they say:
the jobs that died carry what a person would look for (pg-boss: the payments API's 503
with a request id of its own in each error; every job: its key in its arguments), the
fake behind the jobs records each job it accepted once, the records of time move back
together, and a worker started with the fault off runs a job the system retries to
success exactly once.

Skipped where the system cannot run here, unless ``QUEUEBOT_REQUIRE_SYSTEMS=1`` (CI).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from testkit.systems.outage import Outage, PgBossCharges, ProcrastinateMails, worker
from tests.helpers.systems import real_system
from tests.systems.test_systems import RETRY

OUTAGES = {"pg-boss": PgBossCharges, "procrastinate": ProcrastinateMails}


def _outage(name: str) -> Outage:
    real_system(name)  # skipped (or failed, where required) when the system cannot run here
    return OUTAGES[name]()


def _arguments(url: str, name: str, ids: list[str]) -> dict[str, dict[str, object]]:
    sql = {
        "pg-boss": "SELECT id::text, data FROM pgboss.job WHERE id = ANY(%s::uuid[])",
        "procrastinate": "SELECT id::text, args FROM procrastinate_jobs WHERE id = ANY(%s)",
    }[name]
    with psycopg.connect(url) as conn:
        rows = conn.execute(sql, (ids if name == "pg-boss" else [int(i) for i in ids],)).fetchall()
    return {str(i): dict(data) for i, data in rows}


def _died_at(url: str, name: str) -> list[float]:
    """How many minutes ago each dead job died, by the system's own record."""
    sql = {
        "pg-boss": "SELECT extract(epoch FROM now() - completed_on) / 60 FROM pgboss.job"
        " WHERE state = 'failed'",
        "procrastinate": "SELECT extract(epoch FROM now() - e.at) / 60 FROM procrastinate_events"
        " e WHERE e.type = 'failed'",
    }[name]
    with psycopg.connect(url) as conn:
        return [float(r[0]) for r in conn.execute(sql).fetchall()]


@pytest.mark.postgres
@pytest.mark.parametrize("name", sorted(OUTAGES))
def test_an_outage_leaves_dead_jobs_a_person_can_find_and_a_fix_runs_them_once(
    name: str, libpq_url: str, tmp_path: Path
) -> None:
    outage = _outage(name)
    built = outage.build(libpq_url, ok=3, failing=6, others={"emails": (1, 2)})

    queue = outage.queue
    dead, ok = built.made.dead[queue], built.made.ok[queue]
    assert (len(dead), len(ok)) == (6, 3)
    assert {q: len(ids) for q, ids in built.made.dead.items()} == {queue: 6, "emails": 2}
    key = "invoice" if name == "pg-boss" else "message_id"
    arguments = _arguments(libpq_url, name, dead + ok)
    assert sorted(built.keys) == sorted(dead + ok)
    assert {j: arguments[j][key] for j in dead + ok} == built.keys
    assert len(set(built.keys.values())) == 9
    assert all(re.fullmatch(r"(INV|MSG)-1000\d\d", k) for k in built.keys.values())
    if name == "pg-boss":  # each refusal carries a request id of its own
        with psycopg.connect(libpq_url) as conn:
            errors = [
                str(r[0])
                for r in conn.execute(
                    "SELECT output->>'message' FROM pgboss.job WHERE id = ANY(%s::uuid[])",
                    (dead,),
                ).fetchall()
            ]
        ids = [
            re.fullmatch(r"503 Service Unavailable \(request id ([0-9a-f]{16})\)", e)
            for e in errors
        ]
        assert all(ids), errors
        assert len({m.group(1) for m in ids if m}) == 6
    # what went through was accepted once; nothing that died was
    assert outage.accepted(libpq_url) == Counter({built.keys[j]: 1 for j in ok})

    assert max(_died_at(libpq_url, name)) < 5
    outage.backdate(libpq_url, minutes=30)
    assert min(_died_at(libpq_url, name)) > 29

    before = outage.rows(libpq_url, ok + built.made.dead["emails"])
    with worker(outage, libpq_url, fault=False, folder=tmp_path) as running:
        with psycopg.connect(libpq_url, autocommit=True) as conn:
            RETRY[name](conn, dead)  # retried the system's own way
        for _ in range(200):
            if set(outage.states(libpq_url, dead).values()) == {outage.ok_state}:
                break
            assert running.process.poll() is None, running.said()
            time.sleep(0.1)
    assert set(outage.states(libpq_url, dead).values()) == {outage.ok_state}
    assert outage.accepted(libpq_url) == Counter({built.keys[j]: 1 for j in dead + ok})
    assert outage.rows(libpq_url, ok + built.made.dead["emails"]) == before
