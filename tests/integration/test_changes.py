"""Change requests on SQLite and PostgreSQL: freezing, the two-person rule, guarded
execution exactly as the seeds' SQL, skipped rows, expiry and all-or-nothing commits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from commands.messages.changes import change_message
from services import audit
from services.audit import Actor, row_digest
from services.audit.row_digest import digest_of
from services.changes.model import RequestState
from services.config import ApprovalConfig
from services.errors import Conflict, PermissionDenied, PreconditionFailed
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from tests.helpers.people import ALICE, ALICE_ON_DISCORD, BOB_ON_DISCORD, BOB_ON_SLACK, DORA
from tests.integration.support import Shop, rows, said
from tests.kinds import ChangeKind

# after every test here, the audit trail holds, cross-checked with the state tables
pytestmark = pytest.mark.usefixtures("trail_holds")


async def failed_worker_ids(shop: Shop, reason: str) -> list[str]:
    found = await shop.reads.list_dead(queue="workers", filters=DeadFilter(reason=reason))
    return [r.id for r in found.rows if r.status == "failed"]


async def audit_actions(shop: Shop) -> list[tuple[str, str]]:
    return [
        (r["action"], r["subject"])
        for r in await rows(shop, "SELECT action, subject FROM qb_audit_events ORDER BY id")
    ]


async def test_requeue_follows_seed_002_and_the_two_person_rule(shop: Shop) -> None:
    targets = await failed_worker_ids(shop, "implementation_error")
    done = (
        await rows(
            shop, "SELECT id FROM dev_r_worker_queue WHERE status = 'done' ORDER BY id LIMIT 1"
        )
    )[0]["id"]
    before = await rows(
        shop, f"SELECT * FROM dev_r_worker_queue WHERE id IN ({', '.join(targets)}) ORDER BY id"
    )
    view = await shop.changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=(*targets, str(done), "99999")),
        reason="allowlist fixed in PR #2081",
        actor=ALICE,
    )
    assert view.ref == "CR-1" and view.state is RequestState.PENDING
    assert view.eligible == 7
    assert {i.id: i.why for i in view.ineligible} == {
        str(done): "done: already done",
        "99999": "not found",
    }
    assert sum(n for _, n in view.by_signature) == 7

    for same_person in (ALICE, ALICE_ON_DISCORD):
        with pytest.raises(PermissionDenied) as refused:
            await shop.changes.approve(number=1, actor=same_person)
        assert "you requested CR-1; another approver must approve it" in said(refused.value)

    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert decision.executed and decision.view.state is RequestState.EXECUTED
    assert decision.view.result is not None
    assert sorted(decision.view.result.changed, key=int) == sorted(targets, key=int)

    after = {
        r["id"]: r
        for r in await rows(
            shop, f"SELECT * FROM dev_r_worker_queue WHERE id IN ({', '.join(targets)})"
        )
    }
    for old in before:
        new = after[old["id"]]
        assert new["status"] == "queued" and new["retry_count"] == 0
        for cleared in (
            "failure_reason",
            "error_message",
            "next_attempt_at",
            "server_node",
            "claimed_at",
            "started_at",
        ):
            assert new[cleared] is None, cleared
        for kept in (
            "issue_number",
            "job_type",
            "max_retries",
            "queued_at",
            "heartbeat_at",
            "analyst_notes",
            "server_preference",
        ):
            assert new[kept] == old[kept], kept
    assert (await rows(shop, "SELECT status FROM dev_r_worker_queue WHERE id = :i", i=done))[0][
        "status"
    ] == "done"
    assert await audit_actions(shop) == [
        ("change.requested", "CR-1"),
        ("change.approved", "CR-1"),
        ("change.executed", "CR-1"),
    ]

    with pytest.raises(Conflict) as again:
        await shop.changes.approve(number=1, actor=DORA)
    assert "already approved by bob" in said(again.value)


async def test_a_row_that_moved_on_is_skipped_not_forced(shop: Shop) -> None:
    targets = await failed_worker_ids(shop, "timeout")
    await shop.changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=tuple(targets)),
        reason="ssh fixed",
        actor=ALICE,
    )
    moved = targets[0]
    async with shop.engine.begin() as conn:  # a worker claims it between request and approval
        await conn.execute(
            sa.text(
                "UPDATE dev_r_worker_queue SET status = 'claimed', "
                "server_node = 'bms-9' WHERE id = :i"
            ),
            {"i": int(moved)},
        )
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    result = decision.view.result
    assert result is not None
    assert moved not in result.changed and len(result.changed) == len(targets) - 1
    assert [(s.id, s.why) for s in result.skipped] == [
        (moved, "moved on since the request (was failed)")
    ]
    row = (
        await rows(
            shop, "SELECT status, server_node FROM dev_r_worker_queue WHERE id = :i", i=int(moved)
        )
    )[0]
    assert row == {"status": "claimed", "server_node": "bms-9"}


async def test_expired_request_cannot_be_approved(shop: Shop) -> None:
    targets = await failed_worker_ids(shop, "spawn_ram")
    await shop.changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=tuple(targets)),
        reason="ram freed",
        actor=ALICE,
    )
    shop.clock.advance(minutes=31)
    with pytest.raises(Conflict) as late:
        await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert "CR-1 expired at 03:30 UTC" in said(late.value)
    assert (await shop.changes.get(number=1)).state is RequestState.EXPIRED
    assert ("change.expired", "CR-1") in await audit_actions(shop)
    statuses = await rows(
        shop, f"SELECT status FROM dev_r_worker_queue WHERE id IN ({', '.join(targets)})"
    )
    assert {r["status"] for r in statuses} == {"failed"}


async def test_redrive_follows_seed_003_step_4(shop: Shop) -> None:
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg"))
    ids = tuple(r.id for r in dead.rows[:5])
    message_ids = {r.id: r.message_id for r in dead.rows[:5]}
    view = await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=ids),
        reason="OOM fix deployed",
        actor=ALICE,
        incident="INC-7",
        evidence="https://deploys.example/123",
    )
    assert view.by_signature == [
        ("ffmpeg exited with code <n> while transcoding segment <n> of asset <uuid>", 5)
    ]
    shop.clock.advance(minutes=2)
    await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    for job_id in ids:
        d = await shop.reads.show_job(queue="clips", job_id=job_id)
        assert d.status == "QUEUED / PENDING"
        assert d.row["attempt_count"] == 0 and d.row["progress_percent"] == 0
        assert d.row["finished_at"] is None and d.row["error_message"] is None
        message = d.sections[0].rows[0]
        assert message["id"] == message_ids[job_id]
        assert message["attempt_count"] == 0 and message["available_at"] == shop.clock.now
        assert message["claimed_at"] is None and message["last_error"] is None
        redrives = [e for e in d.events if e.event_type == "REDRIVE_REQUESTED"]
        assert len(redrives) == 1
        assert redrives[0].message.startswith(
            "queuebot CR-1: OOM fix deployed (requested by alice, approved by bob)"
        )
    executed = (
        await rows(
            shop,
            "SELECT incident, evidence, details FROM qb_audit_events "
            "WHERE action = 'change.executed'",
        )
    )[0]
    assert executed["incident"] == "INC-7"
    assert executed["evidence"] == "https://deploys.example/123"
    kept = await rows(
        shop,
        "SELECT i.image, coalesce(o.before, i.image) AS before FROM qb_change_items i "
        "JOIN qb_change_outcomes o ON o.request_id = i.request_id AND o.seq = i.seq "
        "WHERE i.request_id = 1 ORDER BY i.seq",
    )
    # each row as it was just before the change, kept in its item, the same shape on
    # SQLite and PostgreSQL; the audit event carries their digest
    assert (
        json.loads(executed["details"])["before"]
        == digest_of([k["before"] for k in kept]).as_json()
    )
    requested = (
        await rows(shop, "SELECT details FROM qb_audit_events WHERE action = 'change.requested'")
    )[0]
    frozen = digest_of([k["image"] for k in kept])
    recorded = json.loads(requested["details"])["items"]
    assert {"rows": recorded["rows"], "sha256": recorded["sha256"]} == frozen.as_json()
    async with shop.engine.connect() as conn:  # and what each item names, sealed too
        again, _ = await row_digest.recompute(conn, 1)
    assert recorded == again.as_json() and again.keys is not None
    assert (await shop.changes.get(number=1)).state is RequestState.EXECUTED
    images = [json.loads(k["before"]) for k in kept]
    assert [json.loads(k["image"]) for k in kept] == images  # nothing moved in between
    assert len(images) == 5
    assert all(set(i) == {"message", "job"} for i in images)
    assert {i["message"]["id"] for i in images} == set(message_ids.values())
    assert {i["job"]["id"] for i in images} == set(ids)
    assert {i["message"]["status"] for i in images} == {"DLQ"}


async def test_redrive_refuses_cancelled_and_live_jobs(shop: Shop) -> None:
    cancelled = (
        await rows(shop, "SELECT id FROM clip_jobs WHERE status = 'CANCELLED' ORDER BY id LIMIT 1")
    )[0]["id"]
    pending = (
        await rows(
            shop,
            "SELECT job_id FROM queue_messages WHERE status = 'PENDING' ORDER BY job_id LIMIT 1",
        )
    )[0]["job_id"]
    with pytest.raises(PreconditionFailed, match="cancelled on purpose") as refused:
        await shop.changes.request(
            kind=ChangeKind.REDRIVE,
            queue="clips",
            selector=Selector(ids=(str(cancelled), str(pending))),
            reason="try again",
            actor=ALICE,
        )
    assert "QUEUED/PENDING: not dead-lettered" in refused.value.message
    assert await audit_actions(shop) == []


async def test_failure_between_update_and_audit_leaves_neither(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=3))
    ids = tuple(r.id for r in dead.rows)
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=ids),
        reason="fixed",
        actor=ALICE,
    )
    real_append = audit.AuditTrail.append

    async def failing_append(self: audit.AuditTrail, conn: Any, **kwargs: Any) -> int:
        if kwargs["action"] == "change.executed":
            raise RuntimeError("injected: the database went away")
        return await real_append(self, conn, **kwargs)

    monkeypatch.setattr(audit.AuditTrail, "append", failing_append)
    with pytest.raises(RuntimeError, match="injected"):
        await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    monkeypatch.undo()

    for job_id in ids:  # the queue update was rolled back with the missing audit event
        d = await shop.reads.show_job(queue="clips", job_id=job_id)
        assert d.status == "FAILED / DLQ"
        assert not [e for e in d.events if e.event_type == "REDRIVE_REQUESTED"]
    assert (await shop.changes.get(number=1)).state is RequestState.PENDING
    assert await audit_actions(shop) == [("change.requested", "CR-1")]
    async with shop.engine.connect() as conn:
        assert (await audit.AuditTrail().verify(conn)).ok
    # and it can still be approved for real afterwards
    assert (await shop.changes.approve(number=1, actor=BOB_ON_SLACK)).executed


async def test_quorum_for_large_changes(shop: Shop) -> None:
    changes = shop.with_approval(ApprovalConfig(large_change_rows=2, large_change_approvals=2))
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=3))
    await changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(r.id for r in dead.rows)),
        reason="fixed",
        actor=ALICE,
    )
    first = await changes.approve(number=1, actor=BOB_ON_SLACK)
    assert not first.executed and first.approvals == 1
    with pytest.raises(Conflict) as twice:
        await changes.approve(number=1, actor=BOB_ON_DISCORD)
    assert "you already approved CR-1; it needs 1 more" in said(twice.value)
    second = await changes.approve(number=1, actor=DORA)
    assert second.executed and second.view.approvals == ["bob", "dora"]


async def test_cancel_duplicates_and_failure_reason_per_seed_002(shop: Shop) -> None:
    view = await shop.changes.request(
        kind=ChangeKind.CANCEL,
        queue="workers",
        selector=Selector(duplicates=True),
        reason="network hiccup",
        actor=ALICE,
    )
    assert view.eligible == 5  # 3 surplus rows of issues queued twice + 2 beside done rows
    await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    left = await rows(
        shop,
        "SELECT issue_number, count(*) AS n FROM dev_r_worker_queue "
        "WHERE status = 'queued' AND issue_number IN "
        "(2100, 2101, 2102, 1000, 1001) GROUP BY issue_number "
        "ORDER BY issue_number",
    )
    assert [(r["issue_number"], r["n"]) for r in left] == [(2100, 1), (2101, 1), (2102, 1)]
    cancelled = await rows(
        shop,
        "SELECT DISTINCT failure_reason, error_message FROM "
        "dev_r_worker_queue WHERE status = 'cancelled' AND "
        "issue_number IN (2100, 1000)",
    )
    assert cancelled == [
        {"failure_reason": "other", "error_message": "manually cancelled: duplicate queued row"}
    ]

    await shop.changes.request(
        kind=ChangeKind.CANCEL,
        queue="workers",
        selector=Selector(failure_reason="mutex_collision"),
        reason="pre-#2091 orphans",
        actor=ALICE,
    )
    await shop.changes.approve(number=2, actor=BOB_ON_SLACK)
    orphans = await rows(
        shop,
        "SELECT status, failure_reason FROM dev_r_worker_queue WHERE issue_number IN (4500, 4501)",
    )
    assert orphans == [{"status": "cancelled", "failure_reason": "mutex_collision"}] * 2


async def test_reject_and_withdraw(shop: Shop) -> None:
    targets = await failed_worker_ids(shop, "spawn_oom")
    for _ in range(2):
        await shop.changes.request(
            kind=ChangeKind.REQUEUE,
            queue="workers",
            selector=Selector(ids=tuple(targets)),
            reason="reroute",
            actor=ALICE,
        )
    with pytest.raises(PermissionDenied, match="only an approver or the requester"):
        await shop.changes.reject(number=1, actor=DORA, reason=None, may_reject_others=False)
    rejected = await shop.changes.reject(
        number=1, actor=BOB_ON_SLACK, reason="wrong node", may_reject_others=True
    )
    assert rejected.state is RequestState.REJECTED and rejected.rejected_by == "bob"
    withdrawn = await shop.changes.reject(
        number=2, actor=ALICE, reason=None, may_reject_others=False
    )
    assert withdrawn.state is RequestState.REJECTED
    with pytest.raises(Conflict) as decided:
        await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert "rejected by bob" in said(decided.value)
    assert await shop.changes.pending() == []


async def test_simultaneous_approvals_execute_once(shop: Shop) -> None:
    targets = await failed_worker_ids(shop, "implementation_error")
    await shop.changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=tuple(targets)),
        reason="fixed",
        actor=ALICE,
    )
    approvers = [Actor(name, "slack", f"U0{name.upper()}") for name in ("bob", "carol", "dave")]
    outcomes = await asyncio.gather(
        *(shop.changes.approve(number=1, actor=a) for a in approvers * 3), return_exceptions=True
    )
    executed = [o for o in outcomes if not isinstance(o, BaseException) and o.executed]
    conflicts = [o for o in outcomes if isinstance(o, Conflict)]
    assert len(executed) == 1 and len(conflicts) == 8, outcomes
    assert all("already approved by" in said(c) for c in conflicts)
    assert [a for a, _ in await audit_actions(shop)].count("change.executed") == 1


async def test_a_rejection_shows_its_reason_and_a_withdrawal_is_called_one(shop: Shop) -> None:
    targets = await failed_worker_ids(shop, "spawn_oom")
    for _ in range(2):
        await shop.changes.request(
            kind=ChangeKind.REQUEUE,
            queue="workers",
            selector=Selector(ids=tuple(targets)),
            reason="reroute",
            actor=ALICE,
        )
    rejected = await shop.changes.reject(
        number=1, actor=BOB_ON_SLACK, reason="wrong node", may_reject_others=True
    )
    text = render_message(change_message(rejected))
    assert "CR-1: requeue 4 row(s) in queue workers - rejected by bob: wrong node" in text
    withdrawn = await shop.changes.reject(
        number=2, actor=ALICE, reason=None, may_reject_others=False
    )
    text = render_message(change_message(withdrawn))
    assert "- withdrawn by alice ==" in text and "rejected" not in text
    with pytest.raises(Conflict) as decided:
        await shop.changes.approve(number=2, actor=BOB_ON_SLACK)
    assert "CR-2 was withdrawn by alice" in said(decided.value)
    with pytest.raises(Conflict) as decided:
        await shop.changes.approve(number=1, actor=ALICE)
    assert "CR-1 was rejected by bob at 03:00 UTC (wrong node)" in said(decided.value)


async def test_a_request_made_before_items_were_kept_still_executes(shop: Shop) -> None:
    """A request still pending from before requests kept their rows as items has its
    targets in its own JSON: the approval adopts them as items and changes the rows."""
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=3))
    ids = tuple(r.id for r in dead.rows)
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=ids),
        reason="fixed",
        actor=ALICE,
    )
    kept = await rows(
        shop,
        "SELECT seq, job_id, part, key, state, signature, image, image_sha256 "
        "FROM qb_change_items WHERE request_id = 1 ORDER BY seq",
    )
    legacy = {
        "items": [
            {
                "id": k["job_id"],
                "key": json.loads(k["key"]),
                "state": k["state"],
                "signature": k["signature"],
                "part": k["part"],
            }
            for k in kept
        ]
    }
    async with shop.engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM qb_change_items WHERE request_id = 1"))
        await conn.execute(
            sa.text("UPDATE qb_change_requests SET targets = :t WHERE id = 1"),
            {"t": json.dumps(legacy)},
        )
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert decision.executed and decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(ids)
    for job_id in ids:
        assert (await shop.reads.show_job(queue="clips", job_id=job_id)).status == (
            "QUEUED / PENDING"
        )
    # a real request of then carries its rows in its audit event, not a digest of items;
    # this one's event has the digest, so its images go back for the trail to hold
    async with shop.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "UPDATE qb_change_items SET image = :image, image_sha256 = :sha "
                "WHERE request_id = 1 AND seq = :seq"
            ),
            [{"image": k["image"], "sha": k["image_sha256"], "seq": k["seq"]} for k in kept],
        )
