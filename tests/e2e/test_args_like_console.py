"""The console finds "the charge for INV-104857" among 4,500 dead pg-boss jobs by its
arguments: /queue show --args-like shows the one job, lists the matches of a shorter text
with how many more there are, /queue dlq --args-like lists it among the dead letters, and
a one-character text is refused saying why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import _pg_conninfo, postgres_database
from tests.e2e.test_console import queuebot, replies
from tests.integration.preset_adapters import PGBOSS_DDL

CONFIG = """
[queues.billing]
preset = "pg-boss"

[people.alice]
roles = ["viewer"]
"""

# 4,500 charges that failed for good: invoices INV-100401 to INV-104900, one job each
CHARGES = """
CREATE TABLE pgboss.j_charge PARTITION OF pgboss.job FOR VALUES IN ('charge');
INSERT INTO pgboss.job (name, state, retry_count, retry_limit, data, output, created_on,
                        start_after, started_on, completed_on)
SELECT 'charge', 'failed', 2, 2,
       jsonb_build_object('invoice', 'INV-' || (100400 + i), 'amount_cents', 1000 + i),
       jsonb_build_object('message', 'card declined by the acquirer'),
       now() - interval '3 hours', now() - interval '3 hours', now() - interval '2 hours',
       now() - interval '1 hour'
FROM generate_series(1, 4500) AS i;
"""


@pytest.fixture
def boss_url() -> Iterator[str]:
    for url in postgres_database("migrated"):
        with psycopg.connect(_pg_conninfo(url), autocommit=True) as conn:
            conn.execute(PGBOSS_DDL)
            conn.execute(CHARGES)
        yield url


@pytest.mark.postgres
def test_the_console_finds_a_dead_job_by_its_arguments(boss_url: str, tmp_path: Path) -> None:
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG)
    env = {"QUEUEBOT_DATABASE_URL": boss_url, "QUEUEBOT_CONFIG": str(config)}
    lines = [
        "/queue show --args-like INV-104857",
        "/queue show --args-like INV-1048",
        "/queue dlq --args-like inv-104857",
        "/queue show --args-like x",
    ]
    console = queuebot(
        "console", "--as", "alice", stdin="\n".join(lines) + "\n", cwd=tmp_path, env=env
    )
    assert console.returncode == 0, console.stderr
    assert "Traceback" not in console.stdout + console.stderr
    out = replies(console.stdout)

    one = out["/queue show --args-like INV-104857"]
    assert "in queue billing: failed (dead)" in one
    assert "The one job in queue billing whose arguments contain 'INV-104857'." in one
    data = [line for line in one.splitlines() if line.startswith("data ")]
    assert len(data) == 1 and "INV-104857" in data[0]  # the job's row, its arguments included

    several = out["/queue show --args-like INV-1048"]
    assert "100 jobs in queue billing have arguments containing 'INV-1048'" in several
    assert "…and 90 more, not listed." in several
    assert "Narrow it with a longer or more distinctive part of the arguments" in several

    dlq = out["/queue dlq --args-like inv-104857"]
    assert "Dead letters in queue billing: 1" in dlq
    assert "card declined by the acquirer" in dlq

    refused = out["/queue show --args-like x"]
    assert "--args-like: needs at least 2 characters" in refused
    assert "Usage: /queue show [ID] [--args-like TEXT] [--queue Q] [--share]" in refused
