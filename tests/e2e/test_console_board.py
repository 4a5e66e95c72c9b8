"""``/queue board`` in ``queuebot demo``, with its simulated worker: an incident, a request,
a plan and dead letters each show on the board, and the board changes as they do: the
approved request leaves "waiting", the plan's bar moves as its waves finish, the audience
told reads "told", and a queue's dead letters are set against the count written down an
hour before."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.e2e.demo_session import DemoSession, demo_session
from tests.e2e.test_console import queuebot

BOARD = "@bob /queue board"
MADE_DEAD = 7  # workers rows that die after the count written an hour before


def one(db: Path, sql: str) -> object:
    with sqlite3.connect(db) as conn:
        found = conn.execute(sql).fetchone()
    return None if found is None else found[0]


def an_hour_of_history(db: Path) -> int:
    """The workers queue's count written down an hour ago, then ``MADE_DEAD`` of its
    queued rows die; its dead letters then."""
    with sqlite3.connect(db) as conn:
        (dead,) = conn.execute(
            "SELECT count(*) FROM dev_r_worker_queue WHERE status IN ('failed', "
            "'failed_permanently')"
        ).fetchone()
        at = datetime.now(UTC) - timedelta(hours=1)
        conn.execute(
            "INSERT INTO qb_queue_samples (queue, at, total, dead, pending, counts) "
            "VALUES ('workers', ?, 0, ?, 0, '{}')",
            (at.strftime("%Y-%m-%d %H:%M:%S.%f"), dead),
        )
        conn.execute(
            "UPDATE dev_r_worker_queue SET status = 'failed_permanently' WHERE id IN "
            f"(SELECT id FROM dev_r_worker_queue WHERE status = 'queued' LIMIT {MADE_DEAD})"
        )
    return int(dead) + MADE_DEAD


def until(demo: DemoSession, check: Callable[[], bool], what: str, within: float = 90) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert demo.demo.poll() is None, demo.demo.communicate()
        assert time.monotonic() < deadline, f"waited for {what}"
        time.sleep(0.3)


def answers(stdout: str, line: str) -> list[str]:
    """The replies to each time ``line`` was typed, in order, without the posts printed
    around them (each a paragraph of its own, starting ``[#channel]``)."""
    found: list[str] = []
    for said in stdout.split(f"\n> {line}\n")[1:]:
        reply = said.split("\n> ", 1)[0]
        found.append("\n\n".join(p for p in reply.split("\n\n") if not p.startswith("[#")).strip())
    return found


def section(board: str, title: str) -> str:
    return board.split(f"== {title}", 1)[1].split("\n== ", 1)[0]


def test_the_board_follows_a_request_a_plan_an_incident_and_dead_letters(tmp_path: Path) -> None:
    db = tmp_path / "queuebot.db"
    built = queuebot("demo", "--no-worker", cwd=tmp_path)  # the estate, and its history
    assert built.returncode == 0, built.stderr
    workers_dead = an_hour_of_history(db)
    with demo_session(tmp_path) as demo:
        demo.say(
            '@dora /incident declare gd:failed-jobs-accumulating "clips die of upstream '
            'timeout" --queue clips'
        )
        demo.say('@alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed"')
        demo.say(BOARD)
        demo.say("@alice /queue board")
        demo.say("@bob /queue approve CR-1")
        demo.say(BOARD)
        until(
            demo, lambda: int(one(db, "SELECT wave FROM qb_plans WHERE id = 1") or 0) >= 1, "wave 1"
        )
        demo.say(BOARD)
        demo.say("@dora /incident notify operators")
        until(
            demo,
            lambda: (
                one(db, "SELECT state FROM qb_incident_obligations WHERE audience = 'operators'")
                == "met"
            ),
            "the operators told",
        )
        demo.say(BOARD)
        demo.wait_for(1, "completed")
        demo.say(BOARD)
        out, err = demo.finish()
    assert demo.demo.returncode == 0, err
    assert "Traceback" not in out + err
    first, approved, moved, told, done = answers(out, BOARD)

    # each on the board: the request, the incident and its deadline, the dead letters
    waiting = section(first, "Waiting for your approval (1)")
    assert "CR-1: staged redrive of 14 dead letter(s) in queue clips. Asked by alice" in waiting
    assert "[Approve CR-1] /queue approve CR-1  [Reject CR-1] /queue reject CR-1" in waiting
    assert "No plan is running or halted." in first
    incident = section(first, "Open incidents (1)")
    # the runbook's 15 minutes, less the moments since the declaration
    assert re.search(
        r"INC-1 \(clips\) clips die of upstream timeout: lead dora; operators due in 1[45] min",
        incident,
    ), incident
    queues = section(first, "Dead letters by queue")
    assert "clips    30 (no count from an hour ago)" in queues
    assert f"workers  {workers_dead} (+{MADE_DEAD} in 1 h)" in queues
    (alices,) = answers(out, "@alice /queue board")
    assert "Nothing is waiting." in section(alices, "Waiting for your approval (0)")
    assert "CR-1" in section(alices, "Your requests waiting for approval (1)")

    # approved: gone from "waiting", and its plan shows with its bar
    assert "Nothing is waiting." in section(approved, "Waiting for your approval (0)")
    plan = section(approved, "Active plans (1)")
    assert "P-1 clips, running: ▱▱▱ 0/3 waves, 2/14 jobs redriven" in plan
    assert "now: sample (2 jobs) running" in plan

    # the plan advanced: its bar moved
    bar = section(moved, "Active plans (1)")
    assert "P-1 clips, running: ▰" in bar and "0/3 waves" not in bar

    # the operators were told
    assert "operators due in" not in section(told, "Open incidents (1)")
    assert "operators told at " in section(told, "Open incidents (1)")

    # the plan done: off the board, and the dead letters it redrove off the count
    assert "No plan is running or halted." in done
    assert "clips    16 (no count from an hour ago)" in section(done, "Dead letters by queue")
