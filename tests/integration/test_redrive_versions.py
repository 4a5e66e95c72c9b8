"""A redrive's approval changes each row only in the state it was frozen in, whether the
rows stayed as frozen (the usual case: each change is held to the row's frozen version
and no image is kept twice) or some changed in place in between (their image from just
before the change is kept beside the frozen one), including a row changed by another
session while the approval waits for it."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from services.estate.message_job import kept
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from tests.helpers.people import ALICE, BOB_ON_SLACK
from tests.integration.support import Shop, rows
from tests.kinds import ChangeKind

# after every test here, the audit trail holds, cross-checked with the state tables
pytestmark = pytest.mark.usefixtures("trail_holds")


@pytest.fixture
def locking(monkeypatch: pytest.MonkeyPatch, db_url: str) -> list[int]:
    """How many times the statement that locks first ran (PostgreSQL; on SQLite the
    change goes through queuebot, and this stays empty)."""
    calls: list[int] = []
    real = kept._locking

    async def counted(*args: Any, **kwargs: Any) -> kept.Kept:
        calls.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(kept, "_locking", counted)
    return calls


def on_postgres(db_url: str) -> bool:
    return db_url.startswith("postgresql")


async def request_redrive(shop: Shop, count: int) -> list[str]:
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg"))
    ids = [r.id for r in dead.rows[:count]]
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(ids)),
        reason="OOM fix deployed",
        actor=ALICE,
    )
    return ids


async def outcomes(shop: Shop) -> dict[str, dict[str, Any] | None]:
    """Each changed item's job and its image from just before the change, where that is
    not the frozen image (None where it is)."""
    found = await rows(
        shop,
        "SELECT i.job_id, o.before FROM qb_change_items i "
        "JOIN qb_change_outcomes o ON o.request_id = i.request_id AND o.seq = i.seq "
        "WHERE i.request_id = 1 ORDER BY i.seq",
    )
    return {r["job_id"]: json.loads(r["before"]) if r["before"] else None for r in found}


async def status(shop: Shop, job_id: str) -> str:
    return (await shop.reads.show_job(queue="clips", job_id=job_id)).status


async def test_rows_as_frozen_are_changed_with_no_second_image(
    shop: Shop, locking: list[int], db_url: str
) -> None:
    ids = await request_redrive(shop, 5)
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(ids)
    assert await outcomes(shop) == dict.fromkeys(ids)
    assert [await status(shop, i) for i in ids] == ["QUEUED / PENDING"] * 5
    assert locking == []  # one statement, no lock taken ahead


async def test_rows_changed_in_place_keep_their_image_from_just_before(
    shop: Shop, locking: list[int], db_url: str
) -> None:
    ids = await request_redrive(shop, 5)
    async with shop.engine.begin() as conn:  # still dead and failed, but not the rows frozen
        await conn.execute(
            sa.text("UPDATE queue_messages SET attempt_count = 9 WHERE job_id = :j"),
            {"j": ids[1]},
        )
        await conn.execute(
            sa.text("UPDATE clip_jobs SET progress_percent = 77 WHERE id = :j"), {"j": ids[3]}
        )
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(ids)
    assert not decision.view.result.skipped
    before = await outcomes(shop)
    assert [j for j, image in before.items() if image is not None] == [ids[1], ids[3]]
    message, job = before[ids[1]], before[ids[3]]
    assert message is not None and message["message"]["attempt_count"] == 9
    assert job is not None and job["job"]["progress_percent"] == 77
    assert [await status(shop, i) for i in ids] == ["QUEUED / PENDING"] * 5
    assert locking == ([1] if on_postgres(db_url) else [])


async def test_a_row_that_moved_on_is_left_with_its_job(shop: Shop) -> None:
    ids = await request_redrive(shop, 4)
    async with shop.engine.begin() as conn:  # a worker picked it up again by hand
        await conn.execute(
            sa.text("UPDATE clip_jobs SET status = 'RUNNING' WHERE id = :j"), {"j": ids[2]}
        )
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    result = decision.view.result
    assert result is not None
    assert sorted(result.changed) == sorted(ids[:2] + ids[3:])
    assert [s.id for s in result.skipped] == [ids[2]]
    assert await status(shop, ids[2]) == "RUNNING / DLQ"
    assert set(await outcomes(shop)) == set(ids) - {ids[2]}


@pytest.mark.postgres
async def test_a_row_changed_while_the_approval_waits_for_it(
    shop: Shop, db_url: str, locking: list[int]
) -> None:
    """The first attempt found nothing moved, then waited for a row another session was
    changing: it re-checked that row after the wait, and the locking statement did the
    change with the row's new image."""
    if not db_url.startswith("postgresql"):
        pytest.skip("row locks and waiting on them are PostgreSQL's")
    ids = await request_redrive(shop, 3)
    async with shop.engine.connect() as other:
        # another session holds the dead letter of the second job, changing it in place
        await other.execute(
            sa.text("UPDATE queue_messages SET attempt_count = 5 WHERE job_id = :j"),
            {"j": ids[1]},
        )
        holder = (await other.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
        approval = asyncio.create_task(shop.changes.approve(number=1, actor=BOB_ON_SLACK))
        waiting = 0
        for _ in range(300):  # until a session waits for the lock this one holds
            await asyncio.sleep(0.05)
            async with shop.engine.connect() as probe:  # a new snapshot of the activity
                waiting = (
                    await probe.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE :holder = ANY(pg_blocking_pids(pid))"
                        ),
                        {"holder": holder},
                    )
                ).scalar_one()
            if waiting:
                break
        assert waiting == 1 and not approval.done()
        await other.commit()
        decision = await asyncio.wait_for(approval, 30)
    assert locking == [1]
    assert decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(ids)
    before = await outcomes(shop)
    assert before[ids[0]] is None and before[ids[2]] is None
    image = before[ids[1]]
    assert image is not None and image["message"]["attempt_count"] == 5
    assert [await status(shop, i) for i in ids] == ["QUEUED / PENDING"] * 3
    events = await rows(
        shop,
        "SELECT aggregate_id, count(*) AS n FROM job_events "
        "WHERE event_type = 'REDRIVE_REQUESTED' GROUP BY aggregate_id",
    )
    assert sorted((str(e["aggregate_id"]), e["n"]) for e in events) == sorted((i, 1) for i in ids)


async def test_a_job_changes_with_both_dead_letters_when_one_moved_in_place(
    shop: Shop, locking: list[int], db_url: str
) -> None:
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg"))
    job = dead.rows[0].id
    second = str(uuid.uuid4())
    async with shop.engine.begin() as conn:  # a second dead letter of the same job
        await conn.execute(
            sa.text(
                "INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, "
                "last_error) SELECT :id, job_id, 'DLQ', 3, available_at, last_error "
                "FROM queue_messages WHERE job_id = :j"
            ),
            {"id": second, "j": job},
        )
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=(job,)),
        reason="OOM fix deployed",
        actor=ALICE,
    )
    async with shop.engine.begin() as conn:  # the second one changes in place, still dead
        await conn.execute(
            sa.text("UPDATE queue_messages SET attempt_count = 4 WHERE id = :id"), {"id": second}
        )
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert decision.view.result is not None and decision.view.result.changed == [job]
    found = await rows(
        shop,
        "SELECT i.part, o.before FROM qb_change_items i JOIN qb_change_outcomes o "
        "ON o.request_id = i.request_id AND o.seq = i.seq WHERE i.request_id = 1",
    )
    before = {r["part"]: json.loads(r["before"]) if r["before"] else None for r in found}
    assert len(before) == 2
    image = before.pop(second)
    assert image is not None and image["message"]["attempt_count"] == 4
    assert list(before.values()) == [None]  # the other one as frozen
    statuses = await rows(shop, "SELECT status FROM queue_messages WHERE job_id = :j", j=job)
    assert [r["status"] for r in statuses] == ["PENDING", "PENDING"]
    assert await status(shop, job) == "QUEUED / PENDING"
    assert locking == ([1] if on_postgres(db_url) else [])


@pytest.mark.postgres
async def test_a_deadlock_in_the_first_attempt_leaves_the_change_to_the_locking_one(
    shop: Shop, locking: list[int], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL broke a deadlock just as the first attempt had written everything: the
    savepoint undoes it all, and the change is made once, by the statement that locks."""
    if not on_postgres(db_url):
        pytest.skip("the first attempt is PostgreSQL's")
    real = kept._unmoved

    async def deadlocked(conn: Any, w: Any) -> kept.Kept | None:
        assert await real(conn, w) is not None  # it wrote every row
        # the server aborts the attempt as it does when it breaks a deadlock
        await conn.execute(
            sa.text(
                "DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01'; END $$"
            )
        )
        return None

    monkeypatch.setattr(kept, "_unmoved", deadlocked)
    ids = await request_redrive(shop, 3)
    decision = await shop.changes.approve(number=1, actor=BOB_ON_SLACK)
    assert decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(ids)
    assert locking == [1]
    events = await rows(
        shop,
        "SELECT aggregate_id, count(*) AS n FROM job_events "
        "WHERE event_type = 'REDRIVE_REQUESTED' GROUP BY aggregate_id",
    )
    assert sorted((str(e["aggregate_id"]), e["n"]) for e in events) == sorted((i, 1) for i in ids)
    assert await outcomes(shop) == dict.fromkeys(ids)
