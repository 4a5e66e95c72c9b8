"""An incident's whole journey through ``queuebot console`` on a real system, as a new
user lived it: most jobs of one queue died while a dependency was down, and the people
declare an incident, triage it, find one job by its arguments, try a staged redrive before
the fix is out (the sample dies again and the plan halts, saying so), deploy the fix,
resume the plan to the end, redrive the jobs that died again in the sample, validate,
resolve and export the postmortem.

- pg-boss 10: ``charges``, the payments API answering 503 (a request id in each error).
- Procrastinate: ``mails``, the mail relay refusing them (no error text is kept).

The system's own worker runs in the background the whole time (``testkit/systems/
outage.py``); deploying the fix restarts it with the fault off. The console is one
long-running process: its scheduler runs the plan's waves. At the end every job of the
queue finished exactly once (the fake behind the jobs counts what it accepted) and nothing
else changed: the queue's jobs that had gone through, and the jobs of another queue of the
same table (some of them dead too), are as they were.

Sizes: by default 500 charges (450 dead) and 1,000 mails (900 dead);
``QB_JOURNEY_SIZE=full`` runs the user's 5,000 charges (4,500 dead). Each test prints the
journey's time, from the declaration to the last job done.

Skipped where the system cannot run here, unless ``QUEUEBOT_REQUIRE_SYSTEMS=1`` (CI).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from services.estate.signature import SIGNATURE_SAMPLE
from testkit.systems.outage import Built, Outage, PgBossCharges, ProcrastinateMails, Worker
from tests.conftest import _pg_conninfo, postgres_database
from tests.helpers.systems import real_system
from tests.helpers.text import in_order
from tests.systems.console_session import ConsoleSession

FULL = os.environ.get("QB_JOURNEY_SIZE") == "full"
OTHERS = {"emails": (3, 5)}  # another queue of the same table: 3 sent, 5 dead
BACKDATE_MINUTES = 30  # the outage ended half an hour ago: the dead letters stopped growing
SAMPLE = 3
CONFIG = """\
[queues.{queue}]
preset = "{preset}"
queue_name = "{queue}"

[channels.operators]
slack = "C0OPS"

[people.alice]
roles = ["operator", "approver"]
[people.bob]
roles = ["operator", "approver"]
[people.dora]
roles = ["duty-officer", "operator"]

[roles]
"operations duty officer" = "duty-officer"
"service on-call" = "operator"

[redrive]
poll_seconds = 0.2   # look at a running wave five times a second: a wave ends sooner
velocity = 500       # jobs per second: the waves wait for the worker, not for the cap
"""


@dataclass(frozen=True)
class Case:
    outage: Outage
    ok: int
    failing: int
    selector: str  # what /queue redrive selects the outage's dead jobs with
    summary: str  # the incident's
    fix: str  # the reasons people give
    signatures: Callable[[str, int], None]  # checks triage's signatures of the dead jobs
    halt: Callable[[str], None]  # checks what the halted plan says about its dead-again jobs


def _one_signature(triage: str, dead: int) -> None:
    """One outage, one signature: every dead charge under it, whatever its request id."""
    table = triage.split("-- Dead jobs by error signature", 1)[1].split("\n-- ", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.strip()]
    assert len(rows) == 1, table
    count, signature = rows[0].split(None, 1)
    # triage groups the newest SIGNATURE_SAMPLE dead jobs (at the user's size, 2,000 of 4,500)
    assert int(count.replace(",", "")) == min(dead, SIGNATURE_SAMPLE), table
    assert "Service Unavailable (request id" in signature, table


def _no_error_text(triage: str, dead: int) -> None:
    """Procrastinate keeps no error text: triage says so rather than grouping nothing."""
    assert "by error signature" not in triage, triage
    assert (
        "no error signatures: Procrastinate keeps a job's errors in its workers' logs" in triage
    ), triage


def _same_signature_halt(plan: str) -> None:
    assert "the same signature as before: the fix did not hold" in plan, plan


def _honest_halt(plan: str) -> None:
    """Without error text queuebot cannot tell the failure is the same one: it says what it
    saw (the jobs died again), why it cannot judge the cause, and claims no signature."""
    assert "the same signature as before" not in plan, plan
    assert "a new error" not in plan, plan
    assert "whether they died of the same cause as before cannot be read here" in plan, plan


def pgboss() -> Case:
    ok, failing = (500, 4500) if FULL else (50, 450)
    return Case(
        PgBossCharges(),
        ok,
        failing,
        selector="--error-like 503",
        summary="payments API 503s",
        fix="the payments API fix",
        signatures=_one_signature,
        halt=_same_signature_halt,
    )


def procrastinate() -> Case:
    return Case(
        ProcrastinateMails(),
        100,
        900,
        selector="--all",
        summary="mail relay refused mails",
        fix="the mail relay fix",
        signatures=_no_error_text,
        halt=_honest_halt,
    )


@pytest.fixture
def database() -> Iterator[str]:
    """A migrated queuebot database, which the system's tables join."""
    yield from postgres_database("migrated")


def plan_state(url: str, number: int) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT state FROM qb_plans WHERE id = %s", (number,)).fetchone()
    return None if row is None else str(row[0])


def wait_until(
    what: str, done: Callable[[], bool], *, timeout: float, alive: Callable[[], None]
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        alive()
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.25)


_RECOVERY = re.compile(r"From the declaration to recovery(?: \(validated\))?: (\d+) (s|min)\b")


def recovery_seconds(export: str) -> int:
    found = _RECOVERY.search(export)
    assert found, export
    return int(found.group(1)) * (60 if found.group(2) == "min" else 1)


def approve(console: ConsoleSession, request: str) -> str:
    """bob approves ``request``: the team is alice, bob and dora, as the user's was, so one
    approval must do."""
    said = console.say(
        f"@bob /queue approve {request}", expect=("and executed", "waiting for approval")
    )
    assert f"{request}: " in said and "approved by bob and executed" in said, said
    return said


def validated_items(reply: str) -> dict[str, str]:
    """Each validation item's line of an incident's status, by its name (v1, v2, ...)."""
    lines = reply.split("-- Validation", 1)[1].splitlines()[2:]
    return {line.split()[0]: line for line in lines if re.match(r"v\d+ ", line)}


def journey(case: Case, database: str, tmp_path: Path) -> float:
    """The whole journey; returns its time, from the declaration to the last job done."""
    outage, queue, failing = case.outage, case.outage.queue, case.failing
    url = _pg_conninfo(database)
    built: Built = outage.build(url, ok=case.ok, failing=failing, others=OTHERS)
    outage.backdate(url, minutes=BACKDATE_MINUTES)
    dead, went_through = built.made.dead[queue], built.made.ok[queue]
    others = [i for q in OTHERS for i in built.made.dead[q] + built.made.ok[q]]
    before = outage.rows(url, went_through + others)
    assert len(dead) == failing and sum(outage.accepted(url).values()) == case.ok
    config = tmp_path / "queuebot.toml"
    config.write_text(CONFIG.format(queue=queue, preset=outage.preset))
    workers = tmp_path / "workers"

    running = Worker(outage, url, fault=True, folder=workers)  # the outage goes on
    try:
        with ConsoleSession(config=config, database_url=database, cwd=tmp_path) as console:

            def wait_for_plan(state: str, timeout: float = 120) -> None:
                wait_until(
                    f"P-1 {state}",
                    lambda: plan_state(url, 1) == state,
                    timeout=timeout,
                    alive=console._alive,
                )

            console.say(
                f'@dora /incident declare gd:failed-jobs-accumulating "{case.summary}" '
                f"--queue {queue}",
                expect="INC-1 declared (gd:failed-jobs-accumulating), led by dora",
            )
            declared = time.monotonic()

            triage = console.say(
                f"/queue triage --queue {queue}",
                expect=f"dead letters: {failing:,} ({failing:,} {outage.dead_state})",
            )
            case.signatures(triage, failing)

            # One customer asks about their charge: found by what the job was given.
            job = dead[17]
            key = built.keys[job]
            shown = console.say(f"/queue show --args-like {key} --queue {queue}", expect=job)
            assert f"Job {job} in queue {queue}: {outage.dead_state}" in shown, shown
            assert f"The one job in queue {queue} whose arguments contain '{key}'" in shown
            assert key in shown, shown

            # Before the fix is out: a staged redrive under the incident, to try a sample.
            requested = console.say(
                f"@alice /queue redrive {case.selector} --queue {queue} --sample {SAMPLE} "
                f'--reason "try a sample before {case.fix} is out" --incident INC-1',
                expect="CR-1: staged redrive of",
            )
            assert f"CR-1: staged redrive of {failing:,} dead letter(s) in queue {queue}" in (
                requested
            ), requested
            started = approve(console, "CR-1")
            assert f"plan P-1 started with its sample of {SAMPLE}" in started, started

            # The worker, the fault still on, runs the sample: it dies again, the plan halts
            # and says so in its thread without being asked.
            wait_for_plan("halted")
            console.shown(f"HALTED: {SAMPLE} job(s) of sample re-entered the dead-letter state")
            halted = console.say(
                "/queue plan P-1",
                expect=f"HALTED: {SAMPLE} job(s) of sample re-entered the dead-letter state",
            )
            case.halt(halted)
            assert "Resume (needs a new approval): /queue resume P-1" in halted, halted

            # The fix is deployed: the worker restarts with the fault off.
            running.stop()
            running = Worker(outage, url, fault=False, folder=workers)
            console.say(
                "@dora /incident step dep:job-worker-pool done",
                expect="dep:job-worker-pool",
            )
            console.say(
                f'@alice /queue resume P-1 --reason "{case.fix} is deployed"',
                expect=f"CR-2: resume plan P-1 ({failing - SAMPLE:,} row(s) to go)",
            )
            resumed = approve(console, "CR-2")
            assert "plan P-1 is running again" in resumed, resumed
            wait_for_plan("completed", timeout=300)
            completed = console.say("/queue plan P-1", expect="- completed ==")
            assert f"{failing - SAMPLE:,}/{failing:,} succeeded" in completed, completed
            assert f"{SAMPLE} dead again" in completed, completed

            # The sample's jobs, dead again before the fix: redriven now.
            again = console.say(
                f'@alice /queue redrive --from-plan P-1 --reason "the sample, after {case.fix}" '
                "--incident INC-1",
                expect="CR-3",
            )
            assert f"{SAMPLE} dead letter(s) in queue {queue}" in again, again
            approve(console, "CR-3")
            wait_until(
                f"every job of {queue} done",
                lambda: set(outage.states(url, dead).values()) == {outage.ok_state},
                timeout=120,
                alive=console._alive,
            )
            took = time.monotonic() - declared
            print(f"{outage.preset}: from the declaration to the last job done: {took:.1f} s")

            console.say("@dora /incident step dep:job-queue done", expect="dep:job-queue")
            validated = console.say("@dora /incident validate", expect="-- Validation")
            items = validated_items(validated)
            assert set(items) == {"v1", "v2", "v3"}, validated
            assert "backlog" in items["v2"] and items["v2"].split()[-1] != "-", validated
            for item, line in items.items():  # what queuebot could not measure, by hand
                if " done (queuebot)" not in line:
                    console.say(
                        f'@dora /incident step {item} done --result "every {queue} job done '
                        'once, none dead"',
                        expect=item,
                    )
            confirmed = time.monotonic() - declared
            time.sleep(3)  # the person reads it over: resolving comes seconds later
            console.say("@dora /incident resolve", expect="INC-1 resolved")
            export = console.say("/incident export INC-1", expect=f"# INC-1: {case.summary}")
    finally:
        running.stop()

    # Every job of the queue finished exactly once, by the system's own worker; nothing
    # else changed.
    every = dead + went_through
    assert set(outage.states(url, every).values()) == {outage.ok_state}
    assert outage.accepted(url) == Counter({built.keys[j]: 1 for j in every})
    assert outage.rows(url, went_through + others) == before

    # The postmortem: the recovery time measured to the validation (not to the resolution,
    # seconds later), and every change made under the incident, in order.
    recovery = recovery_seconds(export)
    assert took - 1 <= recovery <= confirmed + 1, (took, recovery, confirmed, export)

    changes = export.split("## Changes made under this incident", 1)[1].split("\n## ", 1)[0]
    assert f"| CR-1 | plan | {queue} | alice | bob | executed | {failing} |" in changes, changes
    assert "| CR-2 | resume |" in changes, changes  # the resume, approved under the incident
    assert f"| CR-3 | plan | {queue} | alice | bob | executed | {SAMPLE} |" in changes, changes
    in_order(
        export.split("## Timeline", 1)[1],
        *[
            "alice requested CR-1",
            "approved CR-1",
            "P-1 sample started",
            "halted",
            "alice requested CR-2",
            "approved CR-2",
            "resumed",
            "P-1 wave",  # "wave 1 started", or its clean waves folded: "waves 1-7 ran"
            "P-1 completed",
            "alice requested CR-3",
            "bob approved CR-3",
            "P-2 sample started",
        ],
    )
    return took


def _case(make: Callable[[], Case], name: str) -> Case:
    real_system(name)  # skipped (or failed, where required) when the system cannot run here
    return make()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "name", "label"),
    [
        pytest.param(pgboss, "pg-boss", "pg-boss", id="the-payments-outage-on-pgboss"),
        pytest.param(
            procrastinate, "procrastinate", "Procrastinate", id="the-mail-outage-on-procrastinate"
        ),
    ],
)
def test_an_outage_from_declaration_to_postmortem(
    make: Callable[[], Case],
    name: str,
    label: str,
    database: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    case = _case(make, name)
    took = journey(case, database, tmp_path)
    record_property("journey_seconds", round(took, 1))
    print(f"{label} journey: {case.failing:,} of {case.ok + case.failing:,} in {took:.1f} s")
