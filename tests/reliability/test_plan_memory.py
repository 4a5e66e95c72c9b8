"""A plan's request and approval hold the same memory whatever the number of dead letters.

``/queue redrive --all`` on 200,000 dead letters once loaded every row into the process
(about 2.2 KB a row) and was OOM-killed under the shipped 512Mi limit; the command, written
down before its ack, then killed every replica that adopted it. A plan's freeze now reads
its candidates a page at a time and the database keeps each page as the request's items;
the approval copies them into the plan in one statement. Measured here with tracemalloc (the
Python heap queuebot allocates), pages made small so that a few thousand rows are many
pages: four times the dead letters must not take even one and a half times the memory.
``python -m bench.redrive_plan --memory`` measures the whole process at 1,000,000.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from bot.bootstrap import wire_services
from services.audit import AuditTrail, row_digest
from services.changes.model import RequestState
from services.config import ApprovalConfig, QueueConfig, RedriveConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.ops import Selector
from services.plans import candidates
from services.reads import samples
from tests.conftest import postgres_database
from tests.helpers.people import ALICE, BOB
from tests.kinds import ChangeKind

pytestmark = pytest.mark.postgres

FILL = """
INSERT INTO video_assets (id, tenant_id, source_object_key, status)
SELECT md5('a' || g)::uuid, 'tenant-' || (g % 7), 'uploads/' || g || '.mp4', 'READY'
FROM generate_series(1, :n) g;
INSERT INTO clip_jobs (id, asset_id, tenant_id, status, attempt_count, progress_percent,
                       error_message, started_at, finished_at)
SELECT md5('j' || g)::uuid, md5('a' || g)::uuid, 'tenant-' || (g % 7), 'FAILED', 3, 20,
       repeat('ffmpeg exited with code 137 while transcoding; ', 20) || (g % 40), now(), now()
FROM generate_series(1, :n) g;
INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, claimed_at,
                            last_error)
SELECT md5('m' || g)::uuid, md5('j' || g)::uuid, 'DLQ', 3, now(), now() - (g || ' s')::interval,
       repeat('ffmpeg exited with code 137 while transcoding; ', 20) || (g % 40)
FROM generate_series(1, :n) g
"""


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


async def plan_peak(url: str, rows: int) -> tuple[int, int, int]:
    """(rows in the plan, its items, the peak bytes traced through request + approval)."""
    engine = create_engine(url)
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            await create_estate_tables(conn, "message_job")
            for statement in FILL.split(";\n"):
                await conn.execute(sa.text(statement), {"n": rows})
        clock = Clock()
        estate = Estate(
            engine=engine, queues={"clips": QueueConfig(profile="message_job")}, clock=clock
        )
        services = wire_services(
            state_engine=engine,
            estate=estate,
            clock=clock,
            approval=ApprovalConfig(large_change_rows=rows + 1),
            redrive=RedriveConfig(max_wave=1000),
            notifier=None,
            audit=AuditTrail(),
            one_database=False,
        )
        async with engine.begin() as conn:  # a measured, flat dead-letter count
            await samples.record(
                conn, profile=estate.profile("clips"), now=clock.now - timedelta(minutes=15)
            )
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            request = await services.changes.request(
                kind=ChangeKind.PLAN,
                queue="clips",
                selector=Selector(all_dead=True),
                reason="transcoder fixed",
                actor=ALICE,
            )
            decision = await services.changes.approve(number=request.number, actor=BOB)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert decision.view.state is RequestState.EXECUTED
        async with engine.connect() as conn:
            items = (await conn.execute(sa.text("SELECT count(*) FROM qb_plan_items"))).scalar_one()
        return request.eligible, int(items), peak
    finally:
        await engine.dispose()


@pytest.fixture
def two_databases() -> Iterator[tuple[str, str]]:
    small = postgres_database()
    large = postgres_database()
    try:
        yield next(small), next(large)
    finally:
        small.close()
        large.close()


def test_a_plan_four_times_larger_takes_no_more_memory(
    two_databases: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # pages of 250: 2,000 rows are 8 pages, 8,000 are 32 (the digest reads as many)
    monkeypatch.setattr(candidates, "PAGE", 250, raising=False)
    monkeypatch.setattr(row_digest, "_READ_BATCH", 250)
    small_url, large_url = two_databases
    small = asyncio.run(plan_peak(small_url, 2_000))
    large = asyncio.run(plan_peak(large_url, 8_000))
    assert small[:2] == (2_000, 2_000)
    assert large[:2] == (8_000, 8_000)  # every dead letter is in the plan, once
    ratio = large[2] / small[2]
    assert ratio < 1.5, (
        f"a plan of 8,000 dead letters peaked at {large[2] / 1e6:.1f} MB of Python heap, "
        f"{ratio:.2f}x the {small[2] / 1e6:.1f} MB of one of 2,000"
    )
