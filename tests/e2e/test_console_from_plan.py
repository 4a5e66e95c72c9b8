"""The journey of a plan whose sample died again, through the console: the plan halts,
is resumed once the fix is out and completes; its message says how many died again and
names the command; /queue dlq --from-plan lists exactly them, /queue redrive --from-plan
takes them (their deaths are not the dead letters growing: queuebot redrove them) and,
approved, redrives them. Then a death of a job queuebot never redrove is growth: refused
with when it passes, the setting and the override, and accepted with --override-growth,
which the preview shows and the audit names.

The test plays the worker by writing the demo's SQLite database, as the estate's worker
would (a DLQ job event for each message that dies)."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.e2e.test_console import replies
from tests.helpers.processes import clean_environ, interactive

REDRIVE = '@alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed"'


def _now() -> str:
    """A time as queuebot's SQLite rows keep it (UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class Estate:
    """The demo's database, read and written as the team's worker would."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        try:
            with sqlite3.connect(self.db, timeout=30) as conn:
                return list(conn.execute(sql, params).fetchall())
        except sqlite3.OperationalError:  # the demo is still building its estate
            return []

    def write(self, sql: str, *params: Any) -> None:
        with sqlite3.connect(self.db, timeout=30) as conn:
            conn.execute(sql, params)

    def plan_state(self, number: int) -> str | None:
        found = self.rows("SELECT state FROM qb_plans WHERE id = ?", number)
        return str(found[0][0]) if found else None

    def pending(self, plan: int) -> list[tuple[str, str]]:
        """(message, job) of each message of the plan's waiting for the worker (the demo's
        own backlog is left as it is)."""
        return [
            (str(m), str(j))
            for m, j in self.rows(
                "SELECT m.id, m.job_id FROM queue_messages m JOIN qb_plan_items i "
                "ON i.message_id = m.id WHERE i.plan_id = ? AND m.status = 'PENDING'",
                plan,
            )
        ]

    def plan_jobs(self, number: int, wave: int) -> list[str]:
        return [
            str(r[0])
            for r in self.rows(
                "SELECT job_id FROM qb_plan_items WHERE plan_id = ? AND wave = ? ORDER BY seq",
                number,
                wave,
            )
        ]

    def die(self, message: str, job: str, error: str) -> None:
        """The worker failed it again: back in the DLQ, with the estate's DLQ event."""
        now = _now()
        self.write(
            "UPDATE queue_messages SET status = 'DLQ', last_error = ?, claimed_at = ? WHERE id = ?",
            error,
            now,
            message,
        )
        self.write(
            "UPDATE clip_jobs SET status = 'FAILED', error_message = ?, finished_at = ? "
            "WHERE id = ?",
            error,
            now,
            job,
        )
        self.dlq_event(job)

    def dlq_event(self, job: str) -> None:
        self.write(
            "INSERT INTO job_events (id, aggregate_id, event_type, message, created_at) "
            "VALUES (?, ?, 'DLQ', 'Message moved to DLQ after 3 attempts', ?)",
            str(uuid.uuid4()),
            job,
            _now(),
        )

    def succeed(self, message: str, job: str) -> None:
        now = _now()
        self.write(
            "UPDATE queue_messages SET status = 'COMPLETED', claimed_at = ? WHERE id = ?",
            now,
            message,
        )
        self.write(
            "UPDATE clip_jobs SET status = 'SUCCEEDED', progress_percent = 100, "
            "finished_at = ? WHERE id = ?",
            now,
            job,
        )


def wait_until(what: str, done: Callable[[], bool], alive: Callable[[], None]) -> None:
    deadline = time.monotonic() + 90
    while not done():
        alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_what_died_again_is_listed_and_redriven_and_growth_can_be_overridden(
    tmp_path: Path,
) -> None:
    estate = Estate(tmp_path / "queuebot.db")
    env = clean_environ()
    demo = interactive("demo", "--no-worker", cwd=tmp_path, env=env)
    assert demo.stdin is not None

    def say(line: str) -> None:
        assert demo.stdin is not None
        demo.stdin.write(line + "\n")
        demo.stdin.flush()

    def alive() -> None:
        assert demo.poll() is None, demo.communicate()

    def wait_for_state(number: int, state: str) -> None:
        wait_until(f"P-{number} {state}", lambda: estate.plan_state(number) == state, alive)

    try:
        say(REDRIVE)
        say("@bob /queue approve CR-1")
        wait_until("the sample", lambda: len(estate.pending(1)) == 2, alive)
        sample = estate.pending(1)
        again = sorted(job for _, job in sample)
        errors = {
            job: estate.rows("SELECT error_message FROM clip_jobs WHERE id = ?", job)[0][0]
            for job in again
        }
        for message, job in sample:  # the fix is not out yet: both die again, as before
            estate.die(message, job, str(errors[job] or "ffmpeg exited with code 137"))
        wait_for_state(1, "halted")

        say('@alice /queue resume P-1 --reason "the OOM fix is deployed now"')
        say("@bob /queue approve CR-2")
        wait_for_state(1, "running")

        def finish_what_is_out() -> bool:
            for message, job in estate.pending(1):
                estate.succeed(message, job)
            return estate.plan_state(1) == "completed"

        wait_until("P-1 to complete", finish_what_is_out, alive)
        say("/queue plan P-1")
        say("/queue dlq --from-plan P-1")
        say('@alice /queue redrive --from-plan P-1 --reason "the OOM fix holds now"')
        say("@bob /queue approve CR-3")
        wait_until("P-2's sample", lambda: len(estate.pending(2)) == 2, alive)
        redriven = sorted(job for _, job in estate.pending(2))
        p2_sample = sorted(estate.plan_jobs(2, 0))

        # a job queuebot never redrove dies now: that is growth
        other = str(
            estate.rows(
                "SELECT job_id FROM queue_messages WHERE status = 'DLQ' AND last_error "
                "LIKE '%upstream timeout%' ORDER BY job_id LIMIT 1"
            )[0][0]
        )
        estate.dlq_event(other)
        say(f'@alice /queue redrive {other} --reason "upstream is back"')
        say(f'@alice /queue redrive {other} --override-growth --reason "upstream is back"')
        say("@bob /queue approve CR-4")
        say("/queue pending")
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 0, err
    assert "Traceback" not in out + err
    said = replies(out)

    assert (
        "now: done: the sample and 2 wave(s) finished; 12 succeeded, 2 died again: redrive "
        'them with /queue redrive --from-plan P-1 --reason "..."'
    ) in " ".join(said["/queue plan P-1"].split())

    listed = said["/queue dlq --from-plan P-1"]
    assert "P-1's jobs dead again in queue clips: 2" in listed
    listed_jobs = sorted(
        word for line in listed.splitlines() for word in line.split()[:1] if word in again
    )
    assert listed_jobs == again
    assert not any(
        line.split()[0] not in again
        for line in listed.splitlines()
        if line.strip() and len(line.split()[0]) == 36 and line.split()[0].count("-") == 4
    )

    request = " ".join(
        said['@alice /queue redrive --from-plan P-1 --reason "the OOM fix holds now"'].split()
    )
    assert "CR-3: staged redrive of 2 dead letter(s) in queue clips - waiting for approval" in (
        request
    )
    assert "P-1's jobs dead again" in request
    assert (
        "all of them jobs queuebot redrove (P-1) that died again: not counted as growth" in request
    )
    assert redriven == p2_sample == again

    refused = " ".join(said[f'@alice /queue redrive {other} --reason "upstream is back"'].split())
    assert "redrive refused: dead letters not growing (10 min)" in refused
    assert "3 dead-lettered since" in refused
    assert "2 of them jobs queuebot redrove (P-1) that died again, not counted as growth" in (
        refused
    )
    assert "when the newest death counted" in refused and "has left the 10-min window" in (refused)
    assert "[redrive] growth_window_minutes sets it" in refused
    assert "add --override-growth to go ahead" in refused

    overridden = " ".join(
        said[f'@alice /queue redrive {other} --override-growth --reason "upstream is back"'].split()
    )
    assert "CR-4: redrive 1 row(s) in queue clips - waiting for approval" in overridden
    assert "alice overrode a failed precondition (dead letters not growing (10 min))" in overridden
    assert "overridden overridden by alice: upstream is back; measured: 3 dead-lettered" in (
        overridden
    )
    assert "approved by bob and executed" in said["@bob /queue approve CR-4"]

    requested = [
        json.loads(d)
        for (d,) in estate.rows(
            "SELECT details FROM qb_audit_events WHERE action = 'change.requested' "
            "AND subject = 'CR-4'"
        )
    ]
    assert requested[0]["overridden"][0][0] == "dead letters not growing (10 min)"
    assert requested[0]["overridden"][0][1].startswith("overridden by alice: upstream is back")
    status = estate.rows(
        "SELECT status FROM queue_messages WHERE job_id = ? AND status != 'COMPLETED'", other
    )
    assert status == [("PENDING",)]
