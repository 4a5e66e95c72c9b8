"""A change request says how many approvals it needs and who can give them, and one that
the people configured could never approve is refused when it is asked for (issue 26)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.e2e.test_console import queuebot, replies


def failed_worker_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' "
            "AND failure_reason = 'implementation_error' ORDER BY id"
        ).fetchall()
    return [str(i) for (i,) in rows]


def requeue(ids: list[str]) -> str:
    return f'@alice /queue requeue {" ".join(ids)} --queue workers --reason "allowlist fixed"'


def test_a_request_says_who_can_approve_and_one_nobody_can_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "queuebot.db"
    queuebot("demo", cwd=tmp_path)  # the estate and its config (alice and bob approve)
    config = tmp_path / "queuebot.demo.toml"
    # more than 3 rows need 2 approvers besides the requester: alice asks, only bob is left
    text = config.read_text().replace(
        "[approval]\n", "[approval]\nlarge_change_rows = 3\nlarge_change_approvals = 2\n"
    )
    config.write_text(text)
    ids = failed_worker_ids(db)
    assert len(ids) > 3
    big, small = requeue(ids), requeue(ids[:1])
    run = queuebot("demo", "--no-worker", stdin=f"{big}\n{small}\n", cwd=tmp_path)
    out = replies(run.stdout)
    refused = out[big]
    assert (
        f"requeue of {len(ids)} rows needs 2 approvals ([approval] large_change_approvals, "
        "for more than 3 rows), from people other than alice with the approver role: only "
        "1 is configured (bob), so it could never be approved. Nothing was requested" in refused
    ), refused
    assert "add approvers under [people]" in refused
    assert "lower [approval] large_change_approvals to 1" in refused
    with sqlite3.connect(db) as conn:
        (requests,) = conn.execute("SELECT count(*) FROM qb_change_requests").fetchone()
    assert requests == 1  # only the small one was made
    made = out[small]
    assert "CR-1: requeue 1 row(s) in queue workers - waiting for approval (0 of 1)" in made
    assert "Needs 1 approval, from any of: bob" in made

    check = queuebot(
        "config",
        "check",
        cwd=tmp_path,
        env={"QUEUEBOT_DATABASE_URL": f"sqlite:///{db}", "QUEUEBOT_CONFIG": str(config)},
    )
    assert check.returncode == 0, check.stderr
    assert (
        "warning: a change of more than 3 rows (a requeue, cancel, redrive by ids or "
        "rollback) needs 2 approvals besides its requester ([approval] "
        "large_change_approvals), and only 2 people are approvers (alice, bob): such a change "
        "could never be approved when alice or bob requests it; add approvers under [people] "
        '(roles = ["approver"]) or lower [approval] large_change_approvals to 1. A staged '
        "redrive, judged by its sample, needs one approval with --sample 3 or less."
    ) in check.stdout, check.stdout
