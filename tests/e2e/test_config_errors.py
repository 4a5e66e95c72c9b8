"""Configuration mistakes as an operator makes them (issue 26): each is one line that
says where (the file, the section the team wrote, the variable) and how to put it right."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.serving import demo_database
from tests.e2e.test_cli import closed_port_url, one_line
from tests.e2e.test_console import queuebot


def run_check(tmp_path: Path, toml: str, **env: str) -> tuple[int, str, str]:
    config = tmp_path / "team.toml"
    config.write_text(toml)
    result = queuebot("config", "check", cwd=tmp_path, env={"QUEUEBOT_CONFIG": str(config), **env})
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        pytest.param(
            "[approval]\nexpiry_minute = 30\n",
            "approval.expiry_minute = 30: unknown key; did you mean expiry_minutes?",
            id="in-a-section",
        ),
        pytest.param(
            '[queues.jobs]\nprofile = "worker_queue"\ntabel = "jobs"\n',
            "queues.jobs.tabel = 'jobs': unknown key; did you mean table?",
            id="in-a-queue-section",
        ),
    ],
)
def test_a_mistyped_key_gets_a_did_you_mean(tmp_path: Path, toml: str, said: str) -> None:
    code, _, err = run_check(tmp_path, toml)
    assert code == 2
    assert one_line(err) == f"queuebot: {tmp_path / 'team.toml'}: {said}"


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        pytest.param(
            '[queue]\nprofile = "worker_queue"\n[queue.columns]\n"queue.stauts" = "state"\n',
            "queue.columns.queue.stauts: profile worker_queue has no column 'queue.stauts'; "
            "columns are named 'role.column', e.g. 'queue.id'",
            id="a-column-role",
        ),
        pytest.param(
            '[queues.jobs]\npreset = "graphile-worker"\ndeleted_jobs = "succeeded"\n',
            "queues.jobs.deleted_jobs: queue 'jobs' (graphile-worker) needs no deleted_jobs: "
            "graphile-worker deletes a job only when it succeeds, so a job that left its table "
            "succeeded; remove the key",
            id="what-a-deleted-job-means-where-it-is-the-systems-fact",
        ),
    ],
)
def test_an_error_in_a_queues_section_names_the_file_and_the_section_written(
    tmp_path: Path, toml: str, said: str
) -> None:
    with demo_database("sqlite", tmp_path) as url:
        code, _, err = run_check(tmp_path, toml, QUEUEBOT_DATABASE_URL=url)
    assert code == 2
    assert one_line(err) == f"queuebot: {tmp_path / 'team.toml'}: {said}"


def test_a_mistyped_table_names_the_section_the_team_wrote(tmp_path: Path) -> None:
    with demo_database("sqlite", tmp_path) as url:
        toml = '[queues.jobs]\nprofile = "worker_queue"\ntable = "dev_r_worker_queu"\n'
        code, _, err = run_check(tmp_path, toml, QUEUEBOT_DATABASE_URL=url)
    assert code == 1
    assert (
        "problem: queue 'jobs' (worker_queue): table 'dev_r_worker_queu' does not exist in the "
        f"queue database (named by {tmp_path / 'team.toml'}: queues.jobs.table). Did you mean "
        "'dev_r_worker_queue'?"
    ) in err, err
    assert "queuebot demo" not in err
    assert "[queue]" not in err


def test_an_unsupported_url_names_its_variable(tmp_path: Path) -> None:
    code, _, err = run_check(
        tmp_path, "", QUEUEBOT_QUEUE_DATABASE_URL="postgresq://u:secret-pw@db/jobs"
    )
    assert code == 2
    assert one_line(err) == (
        "queuebot: QUEUEBOT_QUEUE_DATABASE_URL: database driver 'postgresq' is not "
        "supported; use PostgreSQL (postgresql://...) or SQLite (sqlite:///path)"
    )


@pytest.mark.parametrize("variable", ["QUEUEBOT_DATABASE_URL", "QUEUEBOT_QUEUE_DATABASE_URL"])
def test_a_url_that_is_no_url_names_its_variable(tmp_path: Path, variable: str) -> None:
    code, out, err = run_check(tmp_path, "", **{variable: "postgresql//u:secret-pw@db/jobs"})
    assert code == 2
    assert one_line(err) == (
        f"queuebot: {variable} is not a valid database URL; expected e.g. "
        "postgresql://user@host/db or sqlite:///./queuebot.db"
    )
    assert "secret-pw" not in out + err


def test_an_unreachable_database_is_shown_as_typed_with_its_password_masked(
    tmp_path: Path,
) -> None:
    url = closed_port_url().replace("queuebot@", "queuebot:secret-pw@")
    result = queuebot("config", "check", cwd=tmp_path, env={"QUEUEBOT_DATABASE_URL": url})
    assert result.returncode == 5
    line = one_line(result.stderr)
    typed = url.replace("secret-pw", "***")
    assert f"queuebot's database {typed} (" in line, line
    assert "secret-pw" not in line


def test_what_a_deleted_job_means_is_one_of_two_words(tmp_path: Path) -> None:
    toml = '[queues.mail]\npreset = "procrastinate"\ndeleted_jobs = "always"\n'
    code, _, err = run_check(tmp_path, toml)
    assert code == 2
    assert one_line(err) == (
        f"queuebot: {tmp_path / 'team.toml'}: queues.mail.deleted_jobs = 'always': expected "
        '"succeeded" (this queue\'s workers delete a job only when it succeeded) or '
        '"unknown" (they may delete failed jobs too: a plan halts on a job that left the '
        "table)"
    )


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (
            '[queues.billing]\npreset = "river"\nqueue_name = "bil\\u0000ling"\n',
            "queues.billing.queue_name",
        ),
        (
            '[queues.jobs]\nprofile = "worker_queue"\n'
            '[queues.jobs.statuses]\ndead = ["DEAD", "DLQ\\u0000"]\n',
            "queues.jobs.statuses.dead[1]",
        ),
    ],
    ids=["queue_name", "a status value"],
)
def test_a_nul_character_anywhere_in_the_file_names_its_key_and_exits_2(
    tmp_path: Path, toml: str, key: str
) -> None:
    """PostgreSQL cannot keep a NUL character in text: one in any string of the file is a
    configuration error naming its key, before a query is ever sent (once the queue's
    tables were there, it reached a query: "unexpected error", exit 70, and every chat
    command answered "Unexpected error")."""
    with demo_database("postgres", tmp_path) as url:
        code, out, err = run_check(tmp_path, toml, QUEUEBOT_DATABASE_URL=url)
    assert code == 2, out + err
    assert one_line(err) == (
        f"queuebot: {tmp_path / 'team.toml'}: {key}: contains a NUL character (\\x00), which "
        "PostgreSQL cannot store; remove it"
    )
