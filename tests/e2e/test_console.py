"""The console and the CLI as a person uses them: a real process, stdin in, stdout out."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.demo import DEMO_CONFIG
from services.db import create_engine
from services.db.migrate import head_revision
from services.estate.demo import build_demo_estate
from tests.helpers import launch
from tests.helpers.processes import clean_environ


def queuebot(
    *args: str, stdin: str = "", cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    base = clean_environ(discord=True)
    return launch.run(
        [sys.executable, "-m", "bot.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=timeout,
        check=False,
    )


def replies(stdout: str) -> dict[str, str]:
    """Map each echoed '> line' to the reply printed after it."""
    out: dict[str, str] = {}
    current: str | None = None
    for line in stdout.splitlines():
        if line.startswith("> "):
            current = line[2:]
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def reply_only(text: str) -> str:
    """A reply without the posts printed after it: the demo's own detector posts to
    #alerts whenever its run comes round, which may fall between any two lines."""
    return re.split(r"^\[#", text, maxsplit=1, flags=re.MULTILINE)[0]


def test_demo_triage_and_show(tmp_path: Path) -> None:
    first = queuebot("demo", stdin="/queue triage\n", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "estate built in queuebot.db" in first.stdout
    triage = replies(first.stdout)["/queue triage"]
    assert "Triage: queue clips (message_job)" in triage
    assert "DLQ             dead         30  15.9%" in triage
    assert "14  ffmpeg exited with code <n> while transcoding segment <n> of asset <uuid>" in triage
    assert "Traceback" not in first.stdout + first.stderr
    job_id = first.stdout.split("@alice /queue show ")[1].split()[0]

    again = queuebot(
        "demo", stdin=f"@alice /queue show {job_id}\n/queue triage --queue workers\n", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert "estate reused" in again.stdout
    out = replies(again.stdout)
    show = out[f"@alice /queue show {job_id}"]
    assert f"Job {job_id} in queue clips: FAILED / DLQ (dead)" in show
    assert "-- Events (8)" in show and "Message moved to DLQ after 3 attempts" in show
    assert "failed_permanently  dead          3   1.4%" in out["/queue triage --queue workers"]


MISSING = "00000000-0000-4000-8000-000000000000"
BAD_INPUT = {
    "/queue frobnicate": "unknown command /queue frobnicate",
    "/queue show": "/queue show needs ID",
    "/queue show 12;drop": "is not a job id",
    "/queue dlq --colour red": "unknown option --colour",
    "/queue dlq --limit": "--limit needs a value",
    "/queue show " + "9" * 4100: "limited to 4,000",
    f"/queue show {MISSING}": f"no job {MISSING}",
}


def test_bad_input_gets_a_clear_reply_not_a_traceback(tmp_path: Path) -> None:
    result = queuebot("demo", stdin="".join(f"{line}\n" for line in BAD_INPUT), cwd=tmp_path)
    assert result.returncode == 0
    assert "Traceback" not in result.stdout + result.stderr
    out = replies(result.stdout)
    for line, expected in BAD_INPUT.items():
        reply = out[line]
        assert expected in reply, (line[:60], reply)
        if MISSING not in line:
            assert "Usage: /queue" in reply, reply


def test_acting_as_unknown_person_is_refused(tmp_path: Path) -> None:
    result = queuebot("demo", "--as", "mallory", cwd=tmp_path)
    assert result.returncode == 2
    assert "--as mallory: no such person (people: alice, bob, dora)" in result.stderr


def demo_estate_on(url: str, *, then: str | None = None) -> None:
    """Build the demo estate in the database at ``url``, then run ``then`` (fixed SQL)."""

    async def build() -> None:
        engine = create_engine(url)
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=datetime.now(UTC))
            if then is not None:
                await conn.execute(sa.text(then))
        await engine.dispose()

    asyncio.run(build())


@pytest.mark.postgres
@pytest.mark.empty_db  # `queuebot db upgrade` creates the tables
def test_console_on_postgres(tmp_path: Path, pg_url: str) -> None:
    demo_estate_on(pg_url)
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config))
    env = {"QUEUEBOT_DATABASE_URL": pg_url, "QUEUEBOT_CONFIG": str(config)}
    upgraded = queuebot("db", "upgrade", cwd=tmp_path, env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"is at revision {head_revision()}" in upgraded.stdout
    assert "postgres@" in upgraded.stdout
    result = queuebot(
        "console",
        "--as",
        "bob",
        stdin="/queue triage --queue workers\n/queue dlq --reason spawn_oom\n",
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    out = replies(result.stdout)
    assert "failed_permanently  dead          3   1.4%" in out["/queue triage --queue workers"]
    assert "unknown failure reason" not in out["/queue dlq --reason spawn_oom"]
    assert "no failure_reason or job type columns" in out["/queue dlq --reason spawn_oom"]

    async def scheduled() -> set[str]:
        engine = create_engine(pg_url)
        try:
            async with engine.connect() as conn:
                found = await conn.execute(sa.text("SELECT DISTINCT kind FROM qb_schedule"))
                return {str(r[0]) for r in found}
        finally:
            await engine.dispose()

    # the console runs the durable scheduler too: counts every minute, expiry of requests
    assert {"queue.sample", "change.expire"} <= asyncio.run(scheduled())
    check = queuebot("config", "check", cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stderr
    assert "queue workers (worker_queue): tables dev_r_worker_queue ok" in check.stdout
    # beneath each queue: the statuses in effect and what its tables turn off (nothing here)
    assert "  statuses of dev_r_worker_queue.status: pending = queued; " in check.stdout
    assert "  every optional table and column is present: nothing is turned off" in check.stdout


def test_bad_config_file_is_refused_naming_key_value_and_expectation(tmp_path: Path) -> None:
    config = tmp_path / "queuebot.toml"
    config.write_text(
        '[people.alice]\nroles = ["aprover"]\n[queue]\nprofile = "message_job"\ntabel = "x"\n'
    )
    result = queuebot("console", cwd=tmp_path, env={"QUEUEBOT_CONFIG": str(config)})
    assert result.returncode == 2
    assert "people.alice.roles.0 = 'aprover': Input should be 'viewer'" in result.stderr
    assert "queue.tabel = 'x': unknown key" in result.stderr


def test_estate_indexes_print(tmp_path: Path) -> None:
    env = {"QUEUEBOT_DATABASE_URL": "postgresql://postgres@127.0.0.1/x"}
    result = queuebot("estate", "indexes", "--print", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert (
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS "qb_workers_status_reason_type" ON '
        '"dev_r_worker_queue" ("status", "failure_reason", "job_type");'
    ) in result.stdout
    assert (
        '"qb_clips_claimed" ON "queue_messages" ("status", "claimed_at") WHERE "status" IN '
        "('PROCESSING', 'DLQ');" in result.stdout
    )
    # database x does not exist: nothing could be checked, and the output says so
    assert "-- its tables could not be read (the queue database " in result.stdout
    assert 'database "x" does not exist' in result.stdout


def test_estate_indexes_print_leaves_out_what_the_tables_lack(tmp_path: Path) -> None:
    """On the demo estate every table is there; without job_events, its index is left
    out with a comment instead of printed as a statement that would fail."""
    before = queuebot("estate", "indexes", "--print", cwd=tmp_path)
    assert before.returncode == 0, before.stderr
    assert (
        "-- its tables could not be read (there is no SQLite file queuebot.db): every index "
        "is listed" in before.stdout
    )
    assert not (tmp_path / "queuebot.db").exists()  # reading left no empty database behind
    assert queuebot("demo", cwd=tmp_path).returncode == 0
    full = queuebot("estate", "indexes", "--print", cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    assert "left out" not in full.stdout and "could not be read" not in full.stdout
    assert '"qb_clips_aggregate" ON "job_events"' in full.stdout
    with sqlite3.connect(tmp_path / "queuebot.db") as db:
        db.execute("DROP TABLE job_events")
    lacking = queuebot("estate", "indexes", "--print", cwd=tmp_path)
    assert lacking.returncode == 0, lacking.stderr
    assert '"job_events"' not in lacking.stdout
    assert "-- qb_clips_aggregate left out: there is no events table (job_events) here" in (
        lacking.stdout
    )


@pytest.mark.postgres
def test_estate_indexes_print_on_postgres_reads_the_tables(tmp_path: Path, pg_url: str) -> None:
    demo_estate_on(pg_url, then="DROP TABLE job_events")
    env = {"QUEUEBOT_DATABASE_URL": pg_url}
    result = queuebot("estate", "indexes", "--print", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "could not be read" not in result.stdout
    assert "-- qb_clips_aggregate left out: there is no events table (job_events) here" in (
        result.stdout
    )
    assert '"job_events"' not in result.stdout
    assert (
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS "qb_clips_job_id" ON "queue_messages" '
        '("job_id");' in result.stdout
    )
