"""A staged redrive on real Procrastinate whose worker deletes the jobs it finishes
(``procrastinate worker --delete-jobs``): a plan judges each wave by the jobs it redrove,
and a job its worker deleted says nothing of how it ended unless the team says so.

- ``--delete-jobs always``, the fault still on: the sample dies again and its jobs are
  deleted. The plan halts after its sample, saying their outcome is unknown and which
  setting would say otherwise; nothing more is redriven (it used to run every wave to
  "completed" with no failure seen).
- ``--delete-jobs successful``, the fault fixed, the queue not configured: the sample
  succeeds and is deleted; queuebot cannot know that, so the plan halts the same way (it
  used to call every job "redriven" forever and the plan 0 succeeded).
- ``--delete-jobs successful`` with ``deleted_jobs = "succeeded"`` on the queue: every job
  is counted as succeeded and the plan completes; the mail relay got each mail once.

``queuebot console`` is one long-running process whose scheduler runs the waves; the
system's own worker runs in the background; plans are small (8 jobs, waves of 1 and 2).
Skipped where Procrastinate cannot run here, unless ``QUEUEBOT_REQUIRE_SYSTEMS=1`` (CI).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.systems.outage import Built, ProcrastinateMails, Worker
from tests.conftest import _pg_conninfo, postgres_database
from tests.helpers.systems import real_system
from tests.systems.console_session import ConsoleSession
from tests.systems.test_journey import approve, plan_state, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
FAILING = 8  # the mails that died while the relay was down
SAMPLE = 2
CONFIG = """\
[queues.mail]
preset = "procrastinate"
queue_name = "mails"
{extra}
[people.alice]
roles = ["operator", "approver"]
[people.bob]
roles = ["operator", "approver"]

[redrive]
poll_seconds = 0.2 # look at a running wave five times a second
velocity = 500     # the waves wait for the worker, not for the cap
first_wave = 1
max_wave = 2
"""
WHY = (
    "Procrastinate's worker deletes finished jobs when it is run with --delete-jobs: "
    "successful deletes only jobs that succeeded, always failed ones too"
)


@pytest.fixture
def database() -> Iterator[str]:
    real_system("procrastinate")  # skipped (or failed, where required) when it cannot run here
    yield from postgres_database("migrated")


def built(database: str, outage: ProcrastinateMails) -> tuple[str, Built]:
    """The relay's outage: FAILING dead mails, which died half an hour ago (the dead
    letters are not growing)."""
    url = _pg_conninfo(database)
    made = outage.build(url, ok=0, failing=FAILING, others={})
    outage.backdate(url, minutes=30)
    assert len(made.made.dead[outage.queue]) == FAILING
    return url, made


def staged_redrive(console: ConsoleSession) -> None:
    console.say(
        f"@alice /queue redrive --all --queue mail --sample {SAMPLE} "
        '--reason "the mail relay answers again"',
        expect="CR-1: staged redrive of",
    )
    started = approve(console, "CR-1")
    assert f"plan P-1 started with its sample of {SAMPLE}" in started, started


def until_settled(console: ConsoleSession, url: str) -> str:
    """The plan's state once it stops running (halted, or completed)."""
    wait_until(
        "P-1 to stop running",
        lambda: plan_state(url, 1) not in (None, "running"),
        timeout=90,
        alive=console._alive,
    )
    return str(plan_state(url, 1))


@pytest.mark.parametrize(
    ("delete_jobs", "fault"),
    [("always", True), ("successful", False)],
    ids=["always-dying-again", "successful-not-configured"],
)
def test_a_plan_whose_jobs_the_worker_deleted_halts_after_its_sample_saying_why(
    database: str, tmp_path: Path, delete_jobs: str, fault: bool
) -> None:
    outage = ProcrastinateMails(delete_jobs=delete_jobs)
    url, made = built(database, outage)
    dead = made.made.dead[outage.queue]
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG.format(extra=""))
    worker = Worker(outage, url, fault=fault, folder=tmp_path / "workers")
    try:
        with ConsoleSession(config=config, database_url=database, cwd=tmp_path) as console:
            staged_redrive(console)
            assert until_settled(console, url) == "halted"
            halt = (
                f"HALTED: {SAMPLE} of the sample's jobs left the table, and this queue's "
                f"workers may delete failed jobs ({WHY}): their outcome is unknown; set "
                f'{config}: queues.mail.deleted_jobs = "succeeded" if this queue\'s workers '
                "delete only jobs that succeeded. Nothing more is redriven."
            )
            console.shown(halt)  # posted in the plan's thread without being asked
            shown = console.say("/queue plan P-1", expect="- HALTED ==")
            assert halt in shown, shown
            assert (
                f"0/{FAILING} succeeded; {SAMPLE} redriven; 0 dead again; {SAMPLE} left the "
                "table, outcome unknown; now: halted in sample"
            ) in shown, shown
    finally:
        worker.stop()
    states = Counter(outage.states(url, dead).values())
    # the sample's jobs are gone; the rest were never redriven
    assert states == Counter({None: SAMPLE, "failed": FAILING - SAMPLE}), states


def test_where_the_queue_says_deleted_jobs_succeeded_the_plan_counts_them_and_completes(
    database: str, tmp_path: Path
) -> None:
    outage = ProcrastinateMails(delete_jobs="successful")
    url, made = built(database, outage)
    dead = made.made.dead[outage.queue]
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG.format(extra='deleted_jobs = "succeeded"\n'))
    worker = Worker(outage, url, fault=False, folder=tmp_path / "workers")
    try:
        with ConsoleSession(config=config, database_url=database, cwd=tmp_path) as console:
            staged_redrive(console)
            assert until_settled(console, url) == "completed"
            shown = console.say("/queue plan P-1", expect="- completed ==")
            assert f"{FAILING}/{FAILING} succeeded; {FAILING} redriven; 0 dead again" in shown
            assert "every wave succeeded" in shown, shown
            assert "unknown" not in shown, shown
    finally:
        worker.stop()
    assert set(outage.states(url, dead).values()) == {None}  # each deleted on success
    assert outage.accepted(url) == Counter({made.keys[j]: 1 for j in dead})  # sent once
