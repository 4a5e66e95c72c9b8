"""Redrive 10,000 dead-lettered message_job jobs on PostgreSQL two ways and compare.

1. queuebot: one change request (freeze + snapshot + hash + audit), one approval that runs
   the guarded set-based update, writes a REDRIVE_REQUESTED event per job and the audit
   event with every row's before-image, in one transaction.
2. the manual redrive runbook's procedure, one job at a time through the same engine: step 3
   (snapshot: SELECT * of the message, the job and its events) and step 4 (BEGIN; UPDATE
   queue_messages; UPDATE clip_jobs; INSERT job_events; COMMIT). Step 4 alone is timed too:
   queuebot does the work of both steps (it snapshots every row before changing it), so the
   target compares against steps 3 + 4; the step-4-only figure is printed beside it.

Target: queuebot >= 20x faster than the per-job procedure and >= 5,000 jobs/s.

    .venv/bin/python bench/redrive.py [--url ADMIN_URL] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from scratch_db import create, drop

from bot.bootstrap import wire_services
from services.audit import Actor, AuditTrail
from services.changes.model import ChangeKind
from services.config import ApprovalConfig, QueueConfig, RedriveConfig
from services.db import create_engine
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.ops import Selector
from services.migrate import upgrade

DB = "qb_bench_redrive"

FILL = """
INSERT INTO video_assets (id, tenant_id, source_object_key, status)
SELECT md5('a' || g)::uuid, 'tenant-' || (g % 7), 'uploads/' || g || '.mp4', 'READY'
FROM generate_series(1, :n) g;
INSERT INTO clip_jobs (id, asset_id, tenant_id, status, attempt_count, progress_percent,
                       error_message, started_at, finished_at)
SELECT md5('j' || g)::uuid, md5('a' || g)::uuid, 'tenant-' || (g % 7), 'FAILED', 3, 20,
       'ffmpeg exited with code 137 while transcoding segment ' || (g % 40), now(), now()
FROM generate_series(1, :n) g;
INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, claimed_at,
                            last_error)
SELECT md5('m' || g)::uuid, md5('j' || g)::uuid, 'DLQ', 3, now(), now(),
       'ffmpeg exited with code 137 while transcoding segment ' || (g % 40)
FROM generate_series(1, :n) g;
CREATE INDEX IF NOT EXISTS bench_qm_job ON queue_messages (job_id);
CREATE INDEX IF NOT EXISTS bench_ev_agg ON job_events (aggregate_id, created_at);
"""
RESET = """
UPDATE queue_messages SET status = 'DLQ', attempt_count = 3, claimed_at = now(),
       last_error = 'ffmpeg exited with code 137';
UPDATE clip_jobs SET status = 'FAILED', attempt_count = 3, progress_percent = 20,
       finished_at = now(), error_message = 'ffmpeg exited with code 137';
DELETE FROM job_events;
"""


async def run(url: str, jobs: int) -> int:
    engine = create_engine(url)
    await upgrade(engine)
    async with engine.begin() as conn:
        await create_estate_tables(conn, "message_job")
        for statement in FILL.split(";\n"):
            if statement.strip():
                await conn.execute(sa.text(statement), {"n": jobs})
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM ANALYZE"))
        ids = [
            str(r[0])
            for r in (await conn.execute(sa.text("SELECT id FROM clip_jobs ORDER BY id"))).all()
        ]
        pairs = [
            (r[0], r[1])
            for r in (
                await conn.execute(sa.text("SELECT id, job_id FROM queue_messages ORDER BY job_id"))
            ).all()
        ]

    estate = Estate(engine=engine, queues={"clips": QueueConfig(profile="message_job")})
    changes = wire_services(
        state_engine=engine,
        estate=estate,
        clock=lambda: datetime.now(UTC),
        approval=ApprovalConfig(large_change_rows=jobs + 1),
        redrive=RedriveConfig(),
        notifier=None,
        audit=AuditTrail(),
        housekeeping=False,
    ).changes
    t0 = time.perf_counter()
    view = await changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(ids)),
        reason="bench",
        actor=Actor("alice", "bench", "alice"),
    )
    t1 = time.perf_counter()
    decision = await changes.approve(number=view.number, actor=Actor("bob", "bench", "bob"))
    t2 = time.perf_counter()
    changed = len(decision.view.result.changed) if decision.view.result else 0
    assert changed == jobs, f"queuebot changed {changed} of {jobs}"
    async with engine.connect() as conn:
        events = (await conn.execute(sa.text("SELECT count(*) FROM job_events"))).scalar_one()
        assert events == jobs, events
        assert (await AuditTrail().verify(conn)).ok

    async with engine.begin() as conn:
        for statement in RESET.split(";\n"):
            if statement.strip():
                await conn.execute(sa.text(statement))
    note = "Operator returned DLQ message to PENDING after root-cause fix"
    snapshot_s = 0.0
    update_s = 0.0
    t3 = time.perf_counter()
    for message_id, job_id in pairs:
        s0 = time.perf_counter()
        async with engine.connect() as conn:  # step 3: snapshot candidate rows
            await conn.execute(
                sa.text("select * from queue_messages where id = :m"), {"m": message_id}
            )
            await conn.execute(sa.text("select * from clip_jobs where id = :j"), {"j": job_id})
            await conn.execute(
                sa.text("select * from job_events where aggregate_id = :j order by created_at asc"),
                {"j": job_id},
            )
        s1 = time.perf_counter()
        async with engine.begin() as conn:  # step 4: the transactional reset
            await conn.execute(
                sa.text(
                    "update queue_messages set status = 'PENDING', attempt_count = 0, "
                    "available_at = now(), claimed_at = null, last_error = null "
                    "where id = :m and status = 'DLQ'"
                ),
                {"m": message_id},
            )
            await conn.execute(
                sa.text(
                    "update clip_jobs set status = 'QUEUED', attempt_count = 0, "
                    "progress_percent = 0, finished_at = null, error_message = null "
                    "where id = :j and status = 'FAILED'"
                ),
                {"j": job_id},
            )
            await conn.execute(
                sa.text(
                    "insert into job_events (id, aggregate_id, event_type, message, created_at) "
                    "values (:e, :j, 'REDRIVE_REQUESTED', :msg, now())"
                ),
                {"e": uuid.uuid4(), "j": job_id, "msg": note},
            )
        snapshot_s += s1 - s0
        update_s += time.perf_counter() - s1
    t4 = time.perf_counter()
    await engine.dispose()

    request_s, approve_s, seed_s = t1 - t0, t2 - t1, t4 - t3
    total = request_s + approve_s
    ratio = seed_s / total
    rate = jobs / total
    assert abs(seed_s - snapshot_s - update_s) < 1.0
    print(f"jobs: {jobs:,} dead-lettered message_job jobs on PostgreSQL")
    print(f"queuebot request (freeze + snapshot + hash + audit): {request_s * 1000:8.0f} ms")
    print(
        f"queuebot approve (guarded update + {jobs:,} events + audit): {approve_s * 1000:8.0f} ms"
    )
    print(f"queuebot total: {total:6.2f} s  ->  {rate:,.0f} jobs/s  (target >= 5,000)")
    print(
        f"manual runbook per job, steps 3 + 4: {seed_s:6.2f} s  ->  {jobs / seed_s:,.0f} jobs/s "
        f"(snapshot {snapshot_s:.2f} s, reset {update_s:.2f} s)"
    )
    print(
        f"speed-up: {ratio:.1f}x against steps 3 + 4  (target >= 20x); "
        f"{update_s / total:.1f}x against step 4 alone"
    )
    ok = ratio >= 20 and rate >= 5000
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    name, url = create(args.url, DB)  # this run's own: concurrent runs never collide
    try:
        return asyncio.run(run(url, args.jobs))
    finally:
        drop(args.url, name)


if __name__ == "__main__":
    sys.exit(main())
