"""The command line on a preset: `config check` names the preset, the queue it keeps to and
what is off; a preset whose system has not made its tables is a problem that says where it
looked; `estate indexes` says why a preset needs none; the console answers /queue triage
and /queue dlq on the system's table in its own words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.systems.river import River
from tests.conftest import _pg_conninfo, postgres_database
from tests.e2e.test_console import queuebot

CONFIG = """
[queues.mail]
preset = "river"
queue_name = "emails"

[queues.pdf]
preset = "procrastinate"

[people.alice]
roles = ["operator"]
"""


@pytest.fixture
def river_url() -> Iterator[str]:
    for url in postgres_database("migrated"):
        River().build(_pg_conninfo(url), queues={"emails": (1, 3), "reports": (1, 2)})
        yield url


@pytest.mark.postgres
def test_the_command_line_on_a_preset(river_url: str, tmp_path: Path) -> None:
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG)
    env = {"QUEUEBOT_DATABASE_URL": river_url, "QUEUEBOT_CONFIG": str(config)}

    checked = queuebot("config", "check", cwd=tmp_path, env=env)
    assert checked.returncode == 1  # the procrastinate queue has no tables here
    assert "queue mail (river): tables public.river_job ok" in checked.stdout
    assert "preset river (River): queue 'emails' of public.river_job" in checked.stdout
    assert "dead = discarded" in checked.stdout
    assert (  # what a redriven job that left the table means, and how to say otherwise
        "  a job that leaves the table: outcome unknown, and a staged redrive halts on it "
        "(River's cleaner deletes finished jobs after a while, discarded ones too); set "
        f'{config}: queues.mail.deleted_jobs = "succeeded" if this queue\'s workers delete '
        "only jobs that succeeded\n"
    ) in checked.stdout
    assert (
        "table 'public.procrastinate_jobs' does not exist in the queue database: the "
        "procrastinate preset looks for the system's own tables in schema 'public'"
    ) in checked.stderr

    config.write_text(CONFIG.replace('[queues.pdf]\npreset = "procrastinate"\n', ""))
    indexes = queuebot("estate", "indexes", cwd=tmp_path, env=env)
    assert indexes.returncode == 0, indexes.stderr
    assert "-- none: a preset reads its system's own tables" in indexes.stdout

    console = queuebot(
        "console", "--as", "alice", stdin="/queue triage\n/queue dlq\n", cwd=tmp_path, env=env
    )
    assert console.returncode == 0, console.stderr
    assert "Triage: queue mail (river)" in console.stdout
    assert "dead letters: 3 (3 discarded)" in console.stdout
    assert "smtp relay did not answer" in console.stdout
