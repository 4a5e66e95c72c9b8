"""Two-person approval through the console: a second person approves, on the demo estate."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.e2e.test_console import queuebot, replies

REQUEUE = '@alice /queue requeue {ids} --queue workers --reason "allowlist fixed in PR #2081"'


def db_rows(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql, params).fetchall()


def test_request_refusals_approval_skip_and_expiry(tmp_path: Path) -> None:
    db = tmp_path / "queuebot.db"
    queuebot("demo", cwd=tmp_path)  # build the estate
    ids = [
        str(i)
        for (i,) in db_rows(
            db,
            "SELECT id FROM dev_r_worker_queue WHERE status = "
            "'failed' AND failure_reason = 'implementation_error' "
            "ORDER BY id",
        )
    ]
    request = REQUEUE.format(ids=" ".join(ids))
    first = queuebot(
        "demo",
        "--no-worker",  # the rows' state is asserted below: no simulated worker moves them
        stdin=f"{request}\n@alice /queue approve CR-1\n@dora /queue approve CR-1\n",
        cwd=tmp_path,
    )
    out = replies(first.stdout)
    assert "CR-1: requeue 7 row(s) in queue workers - waiting for approval (0 of 1)" in out[request]
    assert "[Approve] /queue approve CR-1  [Reject] /queue reject CR-1" in out[request]
    assert (
        "you requested CR-1; another approver must approve it" in out["@alice /queue approve CR-1"]
    )
    assert (
        "/queue approve needs the approver role; dora has: viewer, operator, duty-officer"
        in out["@dora /queue approve CR-1"]
    )

    with sqlite3.connect(db) as conn:  # a worker picks one row up before bob approves
        conn.execute("UPDATE dev_r_worker_queue SET status = 'claimed' WHERE id = ?", (ids[0],))

    second = queuebot("demo", "--no-worker", stdin="@bob /queue approve CR-1\n", cwd=tmp_path)
    approved = replies(second.stdout)["@bob /queue approve CR-1"]
    assert "CR-1: requeue 7 row(s) in queue workers - approved by bob and executed" in approved
    assert "Result: 6 row(s) changed, 1 skipped." in approved
    assert f"Skipped, not forced: {ids[0]}: moved on since the request (was failed)" in approved
    after = db_rows(
        db,
        f"SELECT id, status, retry_count, failure_reason, error_message, "
        f"next_attempt_at, server_node, claimed_at, started_at FROM "
        f"dev_r_worker_queue WHERE id IN ({', '.join(ids)}) ORDER BY id",
    )
    assert after[0][1] == "claimed"
    for row in after[
        1:
    ]:  # exactly the requeue's UPDATE: queued, retries and failure fields cleared
        assert row[1:] == ("queued", 0, None, None, None, None, None, None)

    (other,) = db_rows(db, "SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    third = queuebot("demo", stdin=REQUEUE.format(ids=other) + "\n", cwd=tmp_path)
    assert "CR-2:" in third.stdout
    with sqlite3.connect(db) as conn:  # half an hour passes
        conn.execute(
            "UPDATE qb_change_requests SET expires_at = '2000-01-01 00:00:00.000000' WHERE id = 2"
        )
    fourth = queuebot("demo", stdin="@bob /queue approve CR-2\n/queue pending\n", cwd=tmp_path)
    out = replies(fourth.stdout)
    assert "CR-2 expired at 00:00 UTC without approval" in out["@bob /queue approve CR-2"]
    assert "No change requests are waiting for approval." in out["/queue pending"]

    verified = queuebot("audit", "verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert "audit trail intact: 5 event(s) verified" in verified.stdout
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER qb_audit_events_no_update")
        conn.execute("UPDATE qb_audit_events SET reason = 'nothing happened' WHERE id = 3")
    tampered = queuebot("audit", "verify", cwd=tmp_path)
    assert tampered.returncode == 1
    assert (
        "audit trail BROKEN at event 3: event 3 was edited after it was written" in tampered.stderr
    )
