"""The command line on a preset whose system ships no index finding its dead jobs (Que):
`estate indexes` prints the partial index on them once for the table, whichever queues of
it queuebot reads; the file it prints runs as psql runs it; `config check` says, as
information and not as a problem, that the index is missing and then that it is there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testkit.systems.que import Que
from tests.conftest import _pg_conninfo, postgres_database
from tests.e2e.test_console import queuebot

CONFIG = """
[queues.mail]
preset = "que"
queue_name = "emails"

[queues.reports]
preset = "que"
queue_name = "reports"
"""
CREATE = (
    'CREATE INDEX CONCURRENTLY IF NOT EXISTS "qb_que_jobs_dead" ON "public"."que_jobs" '
    '("queue", "expired_at") WHERE expired_at IS NOT NULL;'
)


@pytest.fixture
def que_url() -> Iterator[str]:
    for url in postgres_database("migrated"):
        Que().build(_pg_conninfo(url), queues={"emails": (1, 3), "reports": (1, 2)})
        yield url


@pytest.mark.postgres
def test_the_dead_jobs_index_from_the_command_line(que_url: str, tmp_path: Path) -> None:
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG)
    env = {"QUEUEBOT_DATABASE_URL": que_url, "QUEUEBOT_CONFIG": str(config)}

    checked = queuebot("config", "check", cwd=tmp_path, env=env)  # (it finds other problems)
    missing = (
        "  dead jobs: no index finds them (Que ships none, and the partial index "
        "qb_que_jobs_dead is not on public.que_jobs): triage's read of the newest dead "
        "jobs' errors, /queue dlq and the dead-letter count a staged redrive checks each "
        "read every job of the table (or of the queue) to find them; `queuebot estate "
        "indexes` prints it (optional)\n"
    )
    assert checked.stdout.count(missing) == 2  # each queue's
    assert "dead jobs" not in checked.stderr  # information, neither problem nor warning

    printed = queuebot("estate", "indexes", cwd=tmp_path, env=env)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines.count(CREATE) == 1  # one index for the table, not one per queue_name
    assert lines[lines.index("-- queue reports (que)") + 1] == (
        "-- qb_que_jobs_dead: the same index as queue mail's, which serves every queue of "
        "public.que_jobs"
    )
    assert "-- Optional: Que ships no index that finds its dead jobs" in printed.stdout
    assert "queuebot never creates an index on it" in printed.stdout

    with psycopg.connect(_pg_conninfo(que_url), autocommit=True) as conn:  # as psql runs it
        for line in lines:
            if line.strip() and not line.startswith("--"):
                conn.execute(line)

    checked = queuebot("config", "check", cwd=tmp_path, env=env)
    assert "dead jobs" not in checked.stderr
    there = (
        "  dead jobs: index qb_que_jobs_dead on public.que_jobs finds them (triage's read "
        "of the newest dead jobs' errors, /queue dlq and the dead-letter count a staged "
        "redrive checks can read them from it)\n"
    )
    assert checked.stdout.count(there) == 2
