"""Housekeeping (the worker-queue retry worker) on SQLite and PostgreSQL: each part
changes exactly its rows, leaves the near misses alone, tells a human before it retires
a row, and a second run changes nothing more."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.alerts.store import INBOX
from services.audit import Actor
from services.db import create_engine
from services.db.migrate import upgrade
from services.errors import UsageError
from services.housekeeping import notices
from services.housekeeping.run import LOCK, parse_only
from tests.integration.housekeeping_support import (
    NOW,
    build_estate,
    fake_webhook,
    housekeeper,
    table_rows,
)

ACTOR = Actor.system("housekeeping")

# (part, what) -> the row ids one run over ROWS changes, with the webhook refusing 999
EXPECTED = {
    ("workers", "A", "cancelled as duplicates"): ["2", "6"],
    ("workers", "B", "requeued with a 5 min backoff"): ["10"],
    ("workers", "B", "requeued with a 15 min backoff"): ["11"],
    ("workers", "B", "requeued with a 45 min backoff"): ["12"],
    ("workers", "B", "retired to failed_permanently"): ["13"],
    ("workers", "C", "deleted"): ["20"],
    ("workers", "D", "released to queued"): ["30"],
    ("workers", "E", "mutex_collision requeued at once"): ["40"],
    ("workers", "E", "spawn_ram requeued with a 5 min backoff"): ["41"],
    ("workers", "F", "re-routed away from bms-4"): ["50", "51", "52"],
}


async def _inbox(engine: AsyncEngine) -> list[dict[str, object]]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.select(INBOX.c.source, INBOX.c.payload).order_by(INBOX.c.id))
        return [dict(r) for r in rows.mappings()]


async def _audit_actions(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT action FROM qb_audit_events ORDER BY id"))
        return [str(r[0]) for r in rows]


async def test_one_run_changes_exactly_each_parts_rows_and_a_second_changes_nothing(
    engine: AsyncEngine,
) -> None:
    estate = await build_estate(engine)
    before = await table_rows(engine)
    async with fake_webhook() as hook:
        keeper = housekeeper(engine, estate, chat=False, webhook=hook.url)
        report = await keeper.run(actor=ACTOR)
        assert report.rows() == EXPECTED
        told = sorted(b["id"] for b in hook.bodies)
        assert told == ["13", "14"]  # both were offered; 14's was refused

        after = await table_rows(engine)
        changed = {i for i in before if before[i] != after.get(i)}
        assert changed == {2, 6, 10, 11, 12, 13, 20, 30, 40, 41, 50, 51, 52}
        assert 20 not in after  # the only deletion
        assert after[2]["status"] == "cancelled" and after[2]["failure_reason"] == "other"
        assert "issue 100 already has a claimed, running or done row" in after[2]["error_message"]
        for ident, retry, wait in ((10, 1, 5), (11, 2, 15), (12, 3, 45)):
            assert after[ident]["status"] == "queued"
            assert after[ident]["retry_count"] == retry
            assert after[ident]["next_attempt_at"] == NOW + timedelta(minutes=wait)
        assert after[13]["status"] == "failed_permanently"
        assert after[13]["error_message"] == before[13]["error_message"]  # kept for audit
        assert after[14]["status"] == "failed"  # nobody was told: it stays failed
        assert after[30]["status"] == "queued" and after[30]["retry_count"] == 0
        assert after[40]["retry_count"] == 1
        assert after[40]["next_attempt_at"] == NOW
        assert after[41]["next_attempt_at"] == NOW + timedelta(minutes=5)
        for ident in (50, 51, 52):
            assert after[ident]["status"] == "queued"
            assert after[ident]["server_node"] is None
            assert after[ident]["server_preference"] is None
        assert after[55]["server_node"] == "bms-4"  # outside the window: not counted, kept

        texts = "\n".join(report.lines())
        assert "1 retry-exhausted row(s) stay failed, not told to anyone" in texts
        assert "the webhook answered HTTP 500" in texts
        assert "reported unavailable: bms-4" in texts

        actions = await _audit_actions(engine)
        assert actions.count("housekeeping.changed") == 8  # one per statement that changed
        assert actions.count("housekeeping.notified") == 1

        inbox = await _inbox(engine)
        names = [p["payload"]["groupLabels"]["alertname"] for p in inbox]  # type: ignore[index]
        assert sorted(names) == sorted(
            [notices.LAST_RETRY, notices.RELEASED, notices.UNAVAILABLE, notices.SUMMARY]
        )

        again = await keeper.run(actor=ACTOR)
        assert again.changed == 0
        assert again.rows() == {}
        assert await table_rows(engine) == after
        # the node stays reported once, not once per run; no new summary
        assert len(await _inbox(engine)) == len(inbox)
        assert (await _audit_actions(engine)).count("housekeeping.changed") == 8


async def test_dry_run_and_real_run_agree_row_for_row(engine: AsyncEngine) -> None:
    estate = await build_estate(engine)
    before = await table_rows(engine)
    keeper = housekeeper(engine, estate, chat=True)
    dry = await keeper.run(actor=ACTOR, dry_run=True)
    assert await table_rows(engine) == before  # a dry run writes nothing
    assert await _inbox(engine) == []
    assert await _audit_actions(engine) == []
    real = await keeper.run(actor=ACTOR)
    assert dry.rows() == real.rows()
    assert real.rows()[("workers", "B", "retired to failed_permanently")] == ["13", "14"]
    assert "would be cancelled as duplicates: 2, 6" in "\n".join(dry.lines())


async def test_a_retry_exhausted_row_is_retired_only_once_someone_is_told(
    engine: AsyncEngine,
) -> None:
    estate = await build_estate(engine)
    nobody = await housekeeper(engine, estate, chat=False).run(actor=ACTOR, only=("B",))
    rows = await table_rows(engine)
    assert rows[13]["status"] == "failed" and rows[14]["status"] == "failed"
    assert "nobody can be told of them" in "\n".join(nobody.lines())

    told = await housekeeper(engine, estate, chat=True).run(actor=ACTOR, only=("B",))
    assert told.rows()[("workers", "B", "retired to failed_permanently")] == ["13", "14"]
    inbox = await _inbox(engine)
    exhausted = [
        p["payload"]
        for p in inbox
        if p["payload"]["groupLabels"]["alertname"] == notices.EXHAUSTED  # type: ignore[index]
    ]
    assert len(exhausted) == 1
    jobs = sorted(a["labels"]["job"] for a in exhausted[0]["alerts"])  # type: ignore[index]
    assert jobs == ["13", "14"]
    actions = await _audit_actions(engine)
    # told, then retired: the notice's audit event comes before the retiring one
    assert actions.index("housekeeping.notified") < len(actions) - 1


async def test_only_runs_the_named_parts(engine: AsyncEngine) -> None:
    estate = await build_estate(engine)
    report = await housekeeper(engine, estate, chat=True).run(actor=ACTOR, only=parse_only("d,a"))
    assert report.rows() == {
        ("workers", "A", "cancelled as duplicates"): ["2", "6"],
        ("workers", "D", "released to queued"): ["30"],
    }
    with pytest.raises(UsageError, match="the parts are A, B, C, D, E, F"):
        parse_only("A,G")


@pytest.mark.postgres
async def test_a_second_run_at_once_skips_and_says_so(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        await upgrade(engine)
        estate = await build_estate(engine)
        before = await table_rows(engine)
        async with engine.connect() as holder:
            await holder.begin()
            await holder.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK})
            report = await housekeeper(engine, estate, chat=True).run(actor=ACTOR)
            await holder.rollback()
        assert report.locked_out
        assert "skipped, another run holds the lock" in report.headline()
        assert await table_rows(engine) == before
        report = await housekeeper(engine, estate, chat=True).run(actor=ACTOR)
        assert not report.locked_out and report.changed
    finally:
        await engine.dispose()
