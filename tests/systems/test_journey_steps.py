"""The journey's steps one at a time, each on a small outage of its own (135 of 150 jobs
dead: more than a hundred, as a change a team of two must still be able to make), so a
step that breaks says which: triage groups the outage under one signature, one job is
found by its arguments, a redrive under the incident it answers is not refused by that
incident, a sample that dies again halts its plan saying what queuebot knows of why,
and once the fix is out the plan resumes, with the one approval a team of two can give,
and runs to its end.

Skipped where the system cannot run here, unless ``QUEUEBOT_REQUIRE_SYSTEMS=1`` (CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.systems.outage import Built, Outage, Worker, worker
from tests.conftest import _pg_conninfo, postgres_database
from tests.helpers.systems import real_system
from tests.systems.console_session import ConsoleSession
from tests.systems.test_journey import (
    BACKDATE_MINUTES,
    CONFIG,
    Case,
    approve,
    pgboss,
    plan_state,
    procrastinate,
    wait_until,
)

OK, FAILING = 15, 135
CASES = {"pg-boss": pgboss, "procrastinate": procrastinate}


@dataclass
class Small:
    name: str
    outage: Outage
    built: Built
    url: str  # libpq, for the system's tools
    database: str  # queuebot's
    config: Path
    folder: Path

    @property
    def queue(self) -> str:
        return self.outage.queue

    @property
    def dead(self) -> list[str]:
        return self.built.made.dead[self.queue]

    def console(self) -> ConsoleSession:
        return ConsoleSession(config=self.config, database_url=self.database, cwd=self.folder)


@pytest.fixture(params=sorted(CASES))
def small(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Small]:
    name: str = request.param
    real_system(name)  # skipped (or failed, where required) when the system cannot run here
    outage = CASES[name]().outage
    for database in postgres_database("migrated"):
        url = _pg_conninfo(database)
        built = outage.build(url, ok=OK, failing=FAILING, others={})
        outage.backdate(url, minutes=BACKDATE_MINUTES)
        config = tmp_path / "queuebot.toml"
        config.write_text(CONFIG.format(queue=outage.queue, preset=outage.preset))
        yield Small(name, outage, built, url, database, config, tmp_path)


@pytest.mark.postgres
def test_triage_shows_the_outage_as_one_signature(small: Small) -> None:
    with small.console() as console:
        triage = console.say(
            f"/queue triage --queue {small.queue}",
            expect=f"dead letters: {FAILING} ({FAILING} {small.outage.dead_state})",
        )
    CASES[small.name]().signatures(triage, FAILING)


@pytest.mark.postgres
def test_one_job_is_found_by_its_arguments(small: Small) -> None:
    job = small.dead[70]
    key = small.built.keys[job]
    with small.console() as console:
        shown = console.say(f"/queue show --args-like {key} --queue {small.queue}", expect=job)
    assert f"Job {job} in queue {small.queue}: {small.outage.dead_state}" in shown, shown
    assert key in shown, shown
    assert f"The one job in queue {small.queue} whose arguments contain '{key}'" in shown, shown


@pytest.mark.postgres
def test_a_redrive_under_the_incident_it_answers_is_not_refused_by_it(small: Small) -> None:
    with small.console() as console:
        console.say(
            "@dora /incident declare gd:failed-jobs-accumulating "
            f'"{CASES[small.name]().summary}" --queue {small.queue}',
            expect="INC-1 declared",
        )
        requested = console.say(
            f"@alice /queue redrive {CASES[small.name]().selector} --queue {small.queue} "
            '--sample 3 --reason "the dependency answers again" --incident INC-1',
            expect=("CR-1", "Refused"),
        )
    assert f"CR-1: staged redrive of {FAILING} dead letter(s)" in requested, requested
    assert "no open incident blocks redrives   ok" in requested, requested


def sample_halted(small: Small, console: ConsoleSession, case: Case) -> None:
    """alice asks for a staged redrive of the case's jobs with a sample of 3, bob
    approves it, and its sample dies again: P-1 halts."""
    console.say(
        f"@alice /queue redrive {case.selector} --queue {small.queue} --sample 3 "
        '--reason "try a sample"',
        expect="CR-1: staged redrive of",
    )
    approve(console, "CR-1")
    wait_until(
        "P-1 halted",
        lambda: plan_state(small.url, 1) == "halted",
        timeout=60,
        alive=console._alive,
    )


@pytest.mark.postgres
@pytest.mark.slow
def test_a_sample_that_dies_again_halts_its_plan_saying_what_is_known(small: Small) -> None:
    case = CASES[small.name]()
    with (
        worker(small.outage, small.url, fault=True, folder=small.folder / "workers"),
        small.console() as console,
    ):
        sample_halted(small, console, case)
        halted = console.say(
            "/queue plan P-1", expect="HALTED: 3 job(s) of sample re-entered the dead-letter state"
        )
    case.halt(halted)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_halted_plan_resumes_with_one_approval_once_fixed_and_runs_to_its_end(
    small: Small,
) -> None:
    case = CASES[small.name]()
    folder = small.folder / "workers"
    running = Worker(small.outage, small.url, fault=True, folder=folder)
    try:
        with small.console() as console:
            sample_halted(small, console, case)
            running.stop()
            running = Worker(small.outage, small.url, fault=False, folder=folder)
            asked = console.say(
                '@alice /queue resume P-1 --reason "the fix is deployed"',
                expect=(f"CR-2: resume plan P-1 ({FAILING - 3} row(s) to go)", "Refused"),
            )
            assert "Refused" not in asked, asked
            approve(console, "CR-2")
            wait_until(
                "P-1 completed",
                lambda: plan_state(small.url, 1) == "completed",
                timeout=120,
                alive=console._alive,
            )
            done = console.say("/queue plan P-1", expect="- completed ==")
    finally:
        running.stop()
    assert f"{FAILING - 3}/{FAILING} succeeded" in done, done
    redriven = small.dead
    states = small.outage.states(small.url, redriven)
    assert sorted(states.values()).count(small.outage.ok_state) == FAILING - 3, states
