"""Every queue read, on SQLite and PostgreSQL, against the shipped DDL and the demo data.

The demo estate's composition is fixed (each profile's demo.py under services/estate/),
so the counts below are exact; a change in any read's SQL that miscounts shows here on
both databases.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from commands.handlers.queue_read import triage_message
from services.config import QueueConfig, default_queues
from services.db import create_engine
from services.errors import ConfigError, NotFound, Unavailable, UsageError
from services.estate.demo import DemoEstate, build_demo_estate
from services.estate.estate import Estate
from services.estate.model import CanonicalState, DeadFilter
from services.estate.ops import Selector
from services.message import Table
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.integration.support import START

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@dataclass
class World:
    reads: QueueReads
    demo: DemoEstate
    dialect: str


@pytest.fixture
async def world(demo_db_url: str, demo_estate: DemoEstate) -> AsyncIterator[World]:
    # A copy of the template holding the demo estate built at START, which is NOW.
    assert NOW == START
    engine = create_engine(demo_db_url)
    demo = demo_estate
    estate = Estate(engine=engine, queues=default_queues(), clock=lambda: NOW)
    yield World(QueueReads(estate, gate=ReadGate(fresh_for=0.0)), demo, engine.dialect.name)
    await engine.dispose()


def statuses(rows: list) -> dict[str, int]:  # type: ignore[type-arg]
    return {s.status: s.count for s in rows}


async def test_message_job_triage_counts(world: World) -> None:
    t = await world.reads.triage(queue="clips")
    assert t.total == 189
    assert statuses(t.by_status) == {"COMPLETED": 124, "PENDING": 29, "PROCESSING": 6, "DLQ": 30}
    assert statuses(t.by_job_status) == {
        "SUCCEEDED": 120,
        "QUEUED": 27,
        "RUNNING": 6,
        "FAILED": 30,
        "CANCELLED": 4,
    }
    assert t.count_in(CanonicalState.DEAD) == 30
    assert [(c.key, c.count) for c in t.by_signature] == [
        ("ffmpeg exited with code <n> while transcoding segment <n> of asset <uuid>", 14),
        ("S3 GetObject failed: NoSuchKey: s3://clips-prod/<path>", 8),
        ("Invalid media: moov atom not found in <uuid>.mp4", 5),
        ("upstream timeout after <n> ms calling transcoder-<n>", 3),
    ]
    assert sorted((tc.key, tc.total) for tc in t.by_type) == [
        ("acme", 8),
        ("globex", 7),
        ("initech", 7),
        ("umbrella", 8),
    ]
    assert t.oldest_pending_age == timedelta(minutes=52)
    assert t.stuck == 3
    assert (t.duplicate_groups, t.duplicate_rows) == (2, 2)


async def test_message_job_triage_since_window(world: World) -> None:
    t = await world.reads.triage(queue="clips", since=timedelta(hours=1))
    assert statuses(t.by_status) == {"PENDING": 29, "PROCESSING": 5}
    assert statuses(t.by_job_status) == {"QUEUED": 27, "RUNNING": 5}
    assert t.by_signature == []


async def test_message_job_triage_rejects_job_type(world: World) -> None:
    with pytest.raises(UsageError, match="no job types"):
        await world.reads.triage(queue="clips", job_type="dev-issue")


async def test_worker_queue_triage_counts(world: World) -> None:
    t = await world.reads.triage(queue="workers")
    assert t.total == 214
    assert statuses(t.by_status) == {
        "done": 150,
        "failed": 21,
        "queued": 20,
        "cancelled": 11,
        "running": 5,
        "claimed": 4,
        "failed_permanently": 3,
    }
    assert {c.key: c.count for c in t.by_reason} == {
        "timeout": 8,
        "implementation_error": 7,
        "spawn_oom": 4,
        "mutex_collision": 2,
        "spawn_ram": 2,
        "stale_duplicate": 1,
    }
    assert t.by_signature[0].key == "ssh spawn timed out after <n>s on bms-<n>"
    assert t.by_signature[0].count == 5
    assert sum(c.count for c in t.by_signature) == 24
    types = {tc.key: tc for tc in t.by_type}
    assert types["continue-issue"].by_state[CanonicalState.FAILED] == 4
    assert sum(tc.total for tc in t.by_type) == 214
    assert t.oldest_pending_age == timedelta(minutes=45)
    assert t.stuck == 3
    assert (t.duplicate_groups, t.duplicate_rows, t.duplicates_of_active) == (3, 3, 2)


async def test_worker_queue_triage_filters(world: World) -> None:
    t = await world.reads.triage(queue="workers", job_type="review-pr")
    assert t.total == 39
    assert {c.key: c.count for c in t.by_reason} == {"timeout": 5}
    recent = await world.reads.triage(queue="workers", since=timedelta(minutes=40))
    # queued 39..12 min ago (10), twice-queued (6), beside active (2); claimed 27, 5, 5 min
    # ago; spawn_oom 10, 16, 22 and spawn_ram 8, 9 min ago
    assert statuses(recent.by_status) == {"queued": 18, "claimed": 3, "failed": 5}


@pytest.mark.parametrize(
    ("queue", "headline", "parts"),
    [
        ("clips", "189 messages; 30 dead letters (30 DLQ; their jobs: 30 FAILED)", {"DLQ": 30}),
        (
            "workers",
            "214 jobs; 24 dead letters (21 failed, 3 failed_permanently)",
            {"failed": 21, "failed_permanently": 3},
        ),
    ],
)
async def test_triage_counts_the_dead_letters_dlq_lists_and_a_redrive_takes(
    world: World, queue: str, headline: str, parts: dict[str, int]
) -> None:
    t = await world.reads.triage(queue=queue)
    listed = await world.reads.list_dead(queue=queue, filters=DeadFilter(limit=1))
    estate = world.reads.estate
    async with estate.connect() as conn:
        taken = await estate.profile(queue).plan_ops.candidate_ids(
            conn, selector=Selector(all_dead=True)
        )
    assert t.dead_letters == listed.total == len(taken) == t.signatures_total
    assert statuses(t.dead_letter_parts) == parts  # the by-status table's own rows
    assert {s.status: s.count for s in t.by_status if s.status in parts} == parts
    message = triage_message(t)
    assert f"Queue {queue}: {headline}, 3 stuck" in message.summary
    assert f"/queue dlq --queue {queue}" in render_message(message)


async def test_message_job_dead_letters_agree_with_the_job_table(world: World) -> None:
    t = await world.reads.triage(queue="clips")
    assert statuses(t.dead_letter_jobs) == {"FAILED": 30}
    assert statuses(t.by_job_status)["FAILED"] == 30
    assert t.count_in(CanonicalState.FAILED) == 0  # messages are never "failed": dead is
    # the tenant table: one count per tenant, not a total beside an equal dead column
    assert all(tc.by_state == {} for tc in t.by_type)
    assert sum(tc.total for tc in t.by_type) == t.dead_letters
    (tenants,) = [
        b for b in triage_message(t).blocks if isinstance(b, Table) and "tenant" in b.columns
    ]
    assert tenants.columns == ("tenant", "total")
    assert tenants.title is not None and tenants.title.startswith("Dead letters by tenant")


async def test_show_message_job_with_events(world: World) -> None:
    d = await world.reads.show_job(queue="clips", job_id=world.demo.dead_job_id)
    assert d.status == "FAILED / DLQ"
    assert d.canonical is CanonicalState.DEAD
    assert [e.event_type for e in d.events] == [
        "QUEUED",
        "CLAIMED",
        "RETRY",
        "CLAIMED",
        "RETRY",
        "CLAIMED",
        "FAILED",
        "DLQ",
    ]
    messages, asset = d.sections
    assert len(messages.rows) == 1 and messages.rows[0]["status"] == "DLQ"
    assert asset.rows[0]["status"] == "READY"
    # a queue_messages.id resolves to its job
    by_message = await world.reads.show_job(queue="clips", job_id=str(messages.rows[0]["id"]))
    assert by_message.job_id == d.job_id


async def test_show_unknown_and_malformed_ids(world: World) -> None:
    with pytest.raises(NotFound, match=r"looked in clip_jobs\.id and queue_messages\.id"):
        await world.reads.show_job(queue="clips", job_id="00000000-0000-4000-8000-000000000000")
    with pytest.raises(UsageError, match="whole numbers"):
        await world.reads.show_job(queue="workers", job_id="abc")
    with pytest.raises(NotFound, match="no job 999999"):
        await world.reads.show_job(queue="workers", job_id="999999")
    if world.dialect == "postgresql":  # UUID columns: a number cannot be an id there
        with pytest.raises(UsageError, match="UUIDs"):
            await world.reads.show_job(queue="clips", job_id="1234")


async def test_show_worker_row_with_siblings(world: World) -> None:
    d = await world.reads.show_job(queue="workers", job_id=world.demo.worker_failed_id)
    assert d.status == "failed"
    assert d.row["failure_reason"] == "implementation_error"
    assert d.events == [] and d.events_note
    dups = await world.reads.list_duplicates(queue="workers")
    first = dups[0].ids[0]
    sibling = await world.reads.show_job(queue="workers", job_id=first)
    assert sibling.sections[0].title == "other rows for issue #2100"
    assert [r["id"] for r in sibling.sections[0].rows] == [int(dups[0].ids[1])]


async def test_dead_letters_message_job(world: World) -> None:
    everything = await world.reads.list_dead(queue="clips", filters=DeadFilter(limit=5))
    assert everything.total == 30 and len(everything.rows) == 5
    times = [r.at for r in everything.rows]
    assert times == sorted(times, reverse=True)
    missing = await world.reads.list_dead(queue="clips", filters=DeadFilter(error_like="nosuchkey"))
    assert missing.total == 8
    acme = await world.reads.list_dead(queue="clips", filters=DeadFilter(tenant="acme"))
    assert acme.total == 8 and {r.group for r in acme.rows} == {"acme"}
    wildcard = await world.reads.list_dead(queue="clips", filters=DeadFilter(error_like="%_"))
    assert wildcard.total == 0  # LIKE wildcards in user text are escaped, not interpreted
    with pytest.raises(UsageError, match=r"--error-like TEXT or --tenant T"):
        await world.reads.list_dead(queue="clips", filters=DeadFilter(reason="timeout"))


async def test_dead_letters_worker_queue(world: World) -> None:
    reads = world.reads
    assert (await reads.list_dead(queue="workers", filters=DeadFilter())).total == 24
    timeout = await reads.list_dead(queue="workers", filters=DeadFilter(reason="timeout"))
    assert timeout.total == 8
    assert {r.status for r in timeout.rows} == {"failed", "failed_permanently"}
    typed = await reads.list_dead(queue="workers", filters=DeadFilter(job_type="continue-issue"))
    assert typed.total == 4
    text = await reads.list_dead(queue="workers", filters=DeadFilter(error_like="INVALID JOB_TYPE"))
    assert text.total == 4
    with pytest.raises(UsageError, match="unknown failure reason"):
        await reads.list_dead(queue="workers", filters=DeadFilter(reason="bogus"))
    with pytest.raises(UsageError, match="no tenants"):
        await reads.list_dead(queue="workers", filters=DeadFilter(tenant="acme"))


async def test_stuck_rows(world: World) -> None:
    clips = await world.reads.list_stuck(queue="clips")
    assert clips.total == 3
    assert all(r.note and r.note.startswith("processing for") for r in clips.rows)
    workers = await world.reads.list_stuck(queue="workers")
    assert workers.total == 3
    assert sorted(r.status for r in workers.rows) == ["claimed", "claimed", "running"]


async def test_duplicates(world: World) -> None:
    workers = await world.reads.list_duplicates(queue="workers")
    assert [(g.key, len(g.ids)) for g in workers] == [
        ("issue #2100", 2),
        ("issue #2101", 2),
        ("issue #2102", 2),
    ]
    clips = await world.reads.list_duplicates(queue="clips")
    assert [len(g.ids) for g in clips] == [2, 2]


async def test_unknown_queue_is_named(world: World) -> None:
    with pytest.raises(NotFound, match="configured queues: clips, workers"):
        await world.reads.triage(queue="nope")


async def test_missing_table_and_column_are_explained(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        estate = Estate(engine=engine, queues={"w": QueueConfig(profile="worker_queue")})
        with pytest.raises(ConfigError, match="queuebot demo"):
            await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).triage()
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, issue_number INTEGER, "
                    "github_issue_number INTEGER, job_type TEXT, state TEXT, failure_reason TEXT, "
                    "error_message TEXT, retry_count INTEGER, max_retries INTEGER, "
                    "queued_at TIMESTAMP, next_attempt_at TIMESTAMP, server_node TEXT, "
                    "server_preference TEXT, started_at TIMESTAMP, "
                    "analyst_notes TEXT, extra_column TEXT)"
                )
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO jobs (id, job_type, state, retry_count, max_retries) "
                    "VALUES (1, 'dev-issue', 'failed', 0, 3), (2, 'dev-issue', 'done', 0, 3)"
                )
            )
        renamed = QueueConfig(
            profile="worker_queue", table="jobs", columns={"queue.status": "state"}
        )
        estate = Estate(engine=engine, queues={"w": renamed})
        with pytest.raises(ConfigError, match=r"lacks column\(s\) claimed_at;"):
            await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).triage()
        async with engine.begin() as conn:  # a required column; heartbeat_at stays absent
            await conn.execute(sa.text("ALTER TABLE jobs ADD COLUMN claimed_at TIMESTAMP"))
        misnamed = renamed.model_copy(
            update={"columns": {"queue.status": "state", "queue.heartbeat_at": "beat"}}
        )
        estate = Estate(engine=engine, queues={"w": misnamed})
        with pytest.raises(ConfigError, match=r"heartbeat_at \(as 'beat'\)"):
            await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).triage()
        estate = Estate(engine=engine, queues={"w": renamed})
        t = await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).triage()
        assert statuses(t.by_status) == {"failed": 1, "done": 1}
    finally:
        await engine.dispose()


async def test_unreachable_database_is_unavailable() -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1:9/nowhere")
    try:
        estate = Estate(engine=engine, queues=default_queues())
        with pytest.raises(Unavailable, match="cannot be reached"):
            await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).triage()
    finally:
        await engine.dispose()


async def test_a_burst_of_first_reads_reflects_the_estate_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commands after a start arrive together: they share one reflection of the
    queue's tables instead of each sending its own catalogue queries to the database."""
    engine = create_engine(db_url)
    try:
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=NOW)
        estate = Estate(engine=engine, queues=default_queues(), clock=lambda: NOW)
        profile = estate.profile("clips")
        reflect = profile._reflect
        calls = []

        def counted(conn: sa.Connection):  # type: ignore[no-untyped-def]
            calls.append(1)
            return reflect(conn)

        monkeypatch.setattr(profile, "_reflect", counted)
        reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
        await asyncio.gather(  # different reads: the read gate shares only identical ones
            reads.triage(queue="clips"),
            reads.list_stuck(queue="clips", limit=5),
            reads.list_stuck(queue="clips", limit=6),
            reads.list_dead(queue="clips", filters=DeadFilter(limit=5)),
        )
        assert len(calls) == 1
    finally:
        await engine.dispose()


async def test_a_read_on_sqlite_goes_on_beside_an_open_write(tmp_path: object) -> None:
    """WAL lets SQLite readers run beside its one writer; reads must not queue for the
    write lock (they did: every transaction began IMMEDIATE) and then be reported as the
    database being unreachable."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/estate.db")
    try:
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=NOW)
        estate = Estate(engine=engine, queues=default_queues(), clock=lambda: NOW)
        reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
        async with engine.begin() as writer:  # a worker holds the write lock meanwhile
            await writer.execute(sa.text("UPDATE dev_r_worker_queue SET status = status"))
            triage = await asyncio.wait_for(reads.triage(queue="workers"), timeout=5)
        assert triage.total > 0
    finally:
        await engine.dispose()


@pytest.mark.parametrize("queue", ["clips", "workers"])
async def test_dead_letters_of_named_jobs_are_listed_however_many_are_named(
    world: World, queue: str
) -> None:
    """/queue dlq --from-plan names the jobs (a plan's that died again): more of them than
    queuebot binds in one statement are listed in shares (on SQLite), and the listing is
    the same as one statement's, newest first with the total."""
    everything = await world.reads.list_dead(queue=queue, filters=DeadFilter(limit=200))
    picked = tuple(r.id for r in everything.rows[::3])
    if queue == "clips":  # more than queuebot puts in one SQLite statement (5,000)
        filler = tuple(f"00000000-0000-4000-8000-{n:012d}" for n in range(6000))
    else:
        filler = tuple(str(10_000_000 + n) for n in range(6000))
    few = await world.reads.list_dead(queue=queue, filters=DeadFilter(job_ids=picked, limit=4))
    many = await world.reads.list_dead(
        queue=queue, filters=DeadFilter(job_ids=filler + picked, limit=4)
    )
    assert few.total == many.total == len({r.id for r in everything.rows if r.id in picked})
    assert [r.id for r in many.rows] == [r.id for r in few.rows]
    assert [r.id for r in few.rows] == [r.id for r in everything.rows if r.id in picked][:4]
