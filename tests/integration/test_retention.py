"""``db prune``'s service on SQLite and PostgreSQL: old done residue goes, recent and
not-done rows stay, every batch deleted has its audit event, the trail (with a change
request's rows) still verifies, and a dry run changes nothing."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services import ledger, outbox, retention
from services.alerts import jobs as alert_jobs
from services.alerts import store as inbox
from services.audit import AuditTrail
from services.audit.anchors import newest_post
from services.db import create_engine, transaction
from services.db.on_commit import FollowUp
from services.db.tables import Delivery
from services.errors import UsageError
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.jsonable import loads
from services.ledger import jobs as ledger_jobs
from services.outbox import jobs as outbox_jobs
from tests.conftest import templates
from tests.helpers.people import ALICE, BOB
from tests.integration.retention_support import AGE, GONE, KEPT, keys, seed
from tests.integration.support import Shop
from tests.kinds import ChangeKind


async def pruned_events(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                "SELECT details, actor_platform, actor_account FROM qb_audit_events "
                "WHERE action = :a ORDER BY id"
            ),
            {"a": retention.ACTION},
        )
        return [{**loads(row[0]), "actor": f"{row[1]}:{row[2]}"} for row in found]


async def audit_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(
            (await conn.execute(sa.text("SELECT count(*) FROM qb_audit_events"))).scalar_one()
        )


async def verified(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        result = await AuditTrail().verify(conn)
    assert result.ok, result.problem
    assert result.records >= 2  # the request and its approval, cross-checked


@pytest.fixture
async def redriven(shop: Shop) -> Shop:
    """An executed redrive (its request, items, outcomes, approval and events) whose
    events are older than any cutoff, beside residue old and new."""
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=3))
    view = await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(r.id for r in dead.rows)),
        reason="fixed",
        actor=ALICE,
    )
    await shop.changes.approve(number=view.number, actor=BOB)
    shop.clock.advance(days=60)
    await seed(shop.engine, shop.clock())
    return shop


async def test_dry_run_counts_and_changes_nothing(redriven: Shop) -> None:
    before, events = await keys(redriven.engine), await audit_count(redriven.engine)
    report = await retention.count(redriven.engine, age=AGE, now=redriven.clock())
    assert {t.table: t.rows for t in report.tables} == GONE
    assert report.cutoff == redriven.clock() - AGE
    assert await keys(redriven.engine) == before
    assert await audit_count(redriven.engine) == events
    assert "no audit event written (dry run)" in "\n".join(report.lines())


async def test_prune_removes_old_done_residue_only_and_audits_each_batch(
    redriven: Shop,
) -> None:
    engine = redriven.engine
    before = await keys(engine)
    report = await retention.prune(engine, AuditTrail(), age=AGE, now=redriven.clock(), batch=1)
    assert {t.table: t.rows for t in report.tables} == GONE
    after = await keys(engine)
    for table, kept in KEPT.items():
        assert kept <= after[table], table  # recent and not-done rows stay
        assert len(before[table]) - len(after[table]) == GONE[table], table
    assert after["qb_outbox"] == KEPT["qb_outbox"]
    assert after["qb_deliveries"] == KEPT["qb_deliveries"]
    assert after["qb_alert_inbox"] == KEPT["qb_alert_inbox"]

    events = await pruned_events(engine)
    assert len(events) == report.events == sum(GONE.values())  # batches of one row
    for table, rows in GONE.items():
        assert sum(e["rows"] for e in events if e["table"] == table) == rows
    assert {e["run"] for e in events} == {report.run}
    assert {e["cutoff"] for e in events} == {(redriven.clock() - AGE).isoformat()}
    assert {e["actor"] for e in events} == {"queuebot:db prune"}
    await verified(engine)

    again = await retention.prune(engine, AuditTrail(), age=AGE, now=redriven.clock())
    assert again.rows == 0 and again.events == 0  # nothing left: no event either
    assert len(await pruned_events(engine)) == len(events)


async def test_serves_hourly_forget_keeps_what_prune_keeps(redriven: Shop) -> None:
    """serve's own hourly forget (the housekeeping job) and db prune share each table's
    rule: past the same cutoff they leave the same rows, the newest anchor post, a claimed
    key and an acknowledged command still unanswered, a set-aside alert included."""
    cutoff = redriven.clock() - AGE
    async with redriven.engine.begin() as conn:
        await ledger.forget(conn, before=cutoff)
        await outbox.forget_done(conn, before=cutoff, spare=newest_post())
        await inbox.forget_processed(conn, before=cutoff)
    after = await keys(redriven.engine)
    for table in ("qb_outbox", "qb_deliveries", "qb_alert_inbox"):
        assert after[table] == KEPT[table], table


async def test_each_domain_forgets_its_own_rows_as_prune_would(redriven: Shop) -> None:
    """serve's hourly forgetting is each domain's own scheduler kind (the ledger's keys,
    the outbox's done items, the alert inbox's notifications), registered by its jobs:
    each run with the cutoff prune uses leaves the rows prune leaves, the newest anchor
    post (which the audit domain asks the outbox to keep) included."""
    cutoff = redriven.clock() - AGE
    kinds = {
        ledger_jobs.FORGET: ledger.KEEP,
        outbox_jobs.FORGET: outbox.KEEP_DONE,
        alert_jobs.FORGET: inbox.KEEP_PROCESSED,
    }
    for kind, keep in kinds.items():
        follow_ups: list[FollowUp] = []  # what the run registers to follow its commit
        async with transaction(redriven.engine, subject=kind, follow_ups=follow_ups) as conn:
            await redriven.scheduler.handlers[kind](conn, "all", cutoff + keep)
        assert follow_ups == []
    after = await keys(redriven.engine)
    for table in ("qb_outbox", "qb_deliveries", "qb_alert_inbox"):
        assert after[table] == KEPT[table], table


async def test_the_audit_trail_and_change_rows_are_never_removed(redriven: Shop) -> None:
    """However old, the trail and what verify cross-checks stay (the tables' counts)."""
    tables = (
        "qb_audit_events",
        "qb_change_requests",
        "qb_change_items",
        "qb_change_outcomes",
        "qb_approvals",
    )

    async def counts() -> dict[str, int]:
        async with redriven.engine.connect() as conn:
            return {
                t: int((await conn.execute(sa.text(f"SELECT count(*) FROM {t}"))).scalar_one())
                for t in tables
            }

    before = await counts()
    assert all(before.values()), before
    redriven.clock.advance(days=3650)
    report = await retention.prune(
        redriven.engine, AuditTrail(), age=retention.FLOOR, now=redriven.clock()
    )
    after = await counts()
    assert after["qb_audit_events"] == before["qb_audit_events"] + report.events
    assert {t: n for t, n in after.items() if t != "qb_audit_events"} == {
        t: n for t, n in before.items() if t != "qb_audit_events"
    }
    await verified(redriven.engine)


async def test_queue_counts_stay_the_samplers_14_days_whatever_the_age(redriven: Shop) -> None:
    """The dead-letter checks look back up to 7 days: counts younger than the 14 days the
    sampler keeps stay, older ones go, but each queue's newest."""
    now = redriven.clock()
    report = await retention.prune(redriven.engine, AuditTrail(), age=retention.FLOOR, now=now)
    assert {t.table: t.cutoff for t in report.tables}["qb_queue_samples"] == now - timedelta(
        days=14
    )
    assert (await keys(redriven.engine))["qb_queue_samples"] == KEPT["qb_queue_samples"]
    await verified(redriven.engine)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("30", "needs a unit"),
        ("-1d", "must be positive"),
        ("0d", "must be positive"),
        ("23h", "at least 24h"),
        ("30x", "unknown unit"),
        ("thirty", "a whole number and a unit"),
        ("99999999w", "at most 5200w"),
    ],
)
def test_bad_ages_are_answered_clearly(given: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        retention.parse_age(given)


def test_ages_in_hours_days_and_weeks() -> None:
    assert retention.parse_age("24h") == timedelta(days=1)
    assert retention.parse_age("30d") == timedelta(days=30)
    assert retention.parse_age("8W") == timedelta(weeks=8)
    assert retention.describe_age(timedelta(days=14)) == "2w"
    assert retention.describe_age(timedelta(hours=36)) == "36h"


async def test_on_sqlite_writers_get_in_between_batches(tmp_path: Path) -> None:
    """SQLite has one write lock: serve's writes wait while a batch runs and get in
    between batches (without the pause, one writer waited out the whole prune)."""
    url = templates().sqlite("migrated", tmp_path)
    pruner, writer = create_engine(url), create_engine(url)
    old = (datetime.now(UTC) - timedelta(days=40)).replace(tzinfo=None)
    async with pruner.begin() as conn:
        await conn.execute(
            sa.text(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000) "
                "INSERT INTO qb_deliveries (key, seen_at, state, done_at) "
                "SELECT 'old:' || n, :old, 'done', :old FROM g"
            ),
            {"old": old},
        )
    waits: list[float] = []
    pruning = asyncio.Event()

    async def write() -> None:
        n = 0
        while not pruning.is_set():
            began = time.perf_counter()
            async with transaction(writer, subject="a delivery") as conn:
                await conn.execute(
                    sa.insert(Delivery).values(key=f"new:{n}", seen_at=datetime.now(UTC))
                )
            waits.append(time.perf_counter() - began)
            n += 1
            await asyncio.sleep(0.01)

    try:
        task = asyncio.create_task(write())
        report = await retention.prune(pruner, AuditTrail(), age=AGE, now=datetime.now(UTC))
        pruning.set()
        await task
    finally:
        await pruner.dispose()
        await writer.dispose()
    batches = sum(t.batches for t in report.tables)
    assert report.rows == 20000 and batches == 20
    assert len(waits) >= batches // 2, waits  # writes went between the batches
    assert max(waits) < 2.0, max(waits)
