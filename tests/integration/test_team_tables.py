"""A team's own tables: only the columns a profile cannot work without, renamed columns,
and the team's own status values mapped onto the profile's states, on SQLite and
PostgreSQL.

Each estate here is built by the test, not from the shipped DDL: a worker table with five
columns, and a message_job estate of messages and jobs alone (no job events, no assets).
Triage, /queue dlq, requeue, redrive and a staged redrive work on them; what an absent
optional column turns off is said, not guessed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from commands.model import Dlq, Stuck
from commands.model import Triage as TriageCommand
from services.changes.model import RequestState
from services.config import QueueConfig
from services.db import create_engine
from services.errors import ConfigError, PreconditionFailed, UsageError
from services.estate import estimate, ops
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.estate.model import CanonicalState, StatusCount, Triage
from services.estate.ops import Action, ItemRef, Selector, Target
from services.estate.profile import plain
from services.estate.worker_queue import WorkerQueueProfile
from services.plans.model import PlanState
from services.reads import samples
from tests.helpers.people import ALICE, BOB
from tests.integration.single_table_profile import SingleTableProfile
from tests.integration.support import START
from tests.integration.team_support import REPORT_COLUMNS, Team, add_worker_rows, open_team
from tests.kinds import ChangeKind

ERROR = "upstream timeout after 30000 ms calling billing-api"
AN_HOUR_AGO = START - timedelta(hours=1)

# The worker table: the five required columns, the status under another name, and one
# optional column (server_node) the team calls ``node``.
WORKER_DDL = {
    "postgresql": "CREATE TABLE team_jobs (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, "
    "error_message TEXT, queued_at TIMESTAMPTZ NOT NULL, claimed_at TIMESTAMPTZ, node TEXT)",
    "sqlite": "CREATE TABLE team_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT "
    "NULL, error_message TEXT, queued_at DATETIME NOT NULL, claimed_at DATETIME, node TEXT)",
}
WORKER_COLUMNS = {"queue.status": "state", "queue.server_node": "node"}
# messages and jobs with their required columns only; no job_events, no video_assets.
MESSAGE_JOB_DDL = {
    "postgresql": [
        "CREATE TABLE clip_jobs (id UUID PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE queue_messages (id UUID PRIMARY KEY, job_id UUID NOT NULL "
        "REFERENCES clip_jobs (id), status TEXT NOT NULL, available_at TIMESTAMPTZ NOT NULL, "
        "claimed_at TIMESTAMPTZ, last_error TEXT)",
    ],
    "sqlite": [
        "CREATE TABLE clip_jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE queue_messages (id TEXT PRIMARY KEY, job_id TEXT NOT NULL "
        "REFERENCES clip_jobs (id), status TEXT NOT NULL, available_at DATETIME NOT NULL, "
        "claimed_at DATETIME, last_error TEXT)",
    ],
}


def counts(triage: Triage) -> dict[str, tuple[CanonicalState, int]]:
    return {s.status: (s.canonical, s.count) for s in triage.by_status}


# -- worker_queue: five columns ----------------------------------------------------------


async def worker_statuses(team: Team, ids: list[str]) -> dict[str, tuple[str, Any, Any]]:
    async with team.engine.connect() as conn:
        q = (await team.profile.tables(conn))["queue"]
        keys = [int(i) for i in ids]
        rows = await conn.execute(
            sa.select(q.c("id"), q.c("status"), q.c("error_message"), q.c("claimed_at")).where(
                q.c("id").in_(keys)
            )
        )
        return {str(r[0]): (r[1], r[2], r[3]) for r in rows.all()}


def failed_row(status: str = "failed", error: str = ERROR, minutes: int = 90) -> dict[str, Any]:
    at = START - timedelta(minutes=minutes)
    return {"status": status, "error_message": error, "queued_at": at, "claimed_at": at}


@pytest.fixture
async def workers(db_url: str) -> AsyncIterator[Team]:
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    config = QueueConfig(profile="worker_queue", table="team_jobs", columns=WORKER_COLUMNS)
    team = await open_team(db_url, config, [WORKER_DDL[dialect]])
    yield team
    await team.engine.dispose()


async def test_a_worker_table_with_only_its_required_columns_is_triaged(workers: Team) -> None:
    dead = await add_worker_rows(
        workers,
        [failed_row(minutes=90 + i) for i in range(3)] + [failed_row("failed_permanently")],
    )
    await add_worker_rows(
        workers,
        [
            {"status": "queued", "queued_at": START - timedelta(minutes=30)},
            {"status": "done", "queued_at": AN_HOUR_AGO, "claimed_at": AN_HOUR_AGO},
            {
                "status": "claimed",
                "queued_at": AN_HOUR_AGO,
                "claimed_at": AN_HOUR_AGO,
                "server_node": "w-9",
            },
            {"status": "running", "queued_at": START, "claimed_at": START},
        ],
    )

    t = await workers.triage(job_type=None)
    assert counts(t) == {
        "failed": (CanonicalState.FAILED, 3),
        "failed_permanently": (CanonicalState.DEAD, 1),
        "queued": (CanonicalState.PENDING, 1),
        "done": (CanonicalState.SUCCEEDED, 1),
        "claimed": (CanonicalState.IN_FLIGHT, 1),
        "running": (CanonicalState.IN_FLIGHT, 1),
    }
    assert t.dead_letters == 4 and await workers.dead_ids() == sorted(dead)
    assert t.stuck == 1  # judged by claimed_at alone: no started_at, no heartbeat_at here
    assert t.oldest_pending_age == timedelta(minutes=30)
    assert t.by_type == [] and t.by_reason == [] and t.duplicate_groups == 0
    assert sum(c.count for c in t.by_signature) == 4
    assert t.notes == [
        "no job_type column: no breakdown by job type",
        "no failure_reason column: no breakdown by failure reason",
        "no issue_number column: duplicates are not detected",
        "no heartbeat_at or started_at column: stuck is judged by claimed_at",
    ]
    with pytest.raises(UsageError, match="has no job_type column"):
        await workers.triage(job_type="dev-issue")
    with pytest.raises(UsageError, match="has no failure_reason column"):
        await workers.dead_ids(reason="timeout")
    with pytest.raises(UsageError, match="has no job_type column"):
        await workers.dead_ids(job_type="dev-issue")
    async with workers.estate.connect() as conn:
        stuck = await workers.profile.stuck(conn, now=START, limit=10)
        with pytest.raises(UsageError, match="has no issue_number column"):
            await workers.profile.duplicates(conn, limit=10)
    assert [r.note for r in stuck.rows] == ["claimed, never started for 1h00m on w-9"]
    assert [r.attempts for r in stuck.rows] == [None]


async def test_a_worker_table_with_only_its_required_columns_is_requeued_and_redriven(
    workers: Team,
) -> None:
    failed = await add_worker_rows(workers, [failed_row(minutes=90 + i) for i in range(3)])
    dead = await add_worker_rows(workers, [failed_row("failed_permanently")])
    queued = await add_worker_rows(workers, [{"status": "queued", "queued_at": START}])

    assert await workers.change(ChangeKind.REQUEUE, [*failed[:2], *queued]) == sorted(failed[:2])
    assert await workers.change(ChangeKind.REDRIVE, [failed[2], *dead]) == sorted(
        [failed[2], *dead]
    )
    after = await worker_statuses(workers, [*failed, *dead])
    assert set(after.values()) == {("queued", None, None)}  # status, error, claim cleared
    assert await workers.dead_ids() == []
    assert (await workers.triage(job_type=None)).dead_letters == 0
    with pytest.raises(UsageError, match="has no issue_number column"):
        await workers.services.changes.request(
            kind=ChangeKind.CANCEL,
            queue="q",
            selector=Selector(duplicates=True),
            reason="duplicates",
            actor=ALICE,
        )


async def test_a_worker_table_with_only_its_required_columns_takes_a_staged_redrive(
    workers: Team,
) -> None:
    dead = await add_worker_rows(workers, [failed_row(minutes=90 + i) for i in range(7)])
    await run_plan(workers, dead, complete=complete_workers)


async def complete_workers(team: Team) -> list[str]:
    async with team.engine.begin() as conn:
        q = (await team.profile.tables(conn))["queue"]
        done = await conn.execute(
            q.table.update()
            .where(q.c("status") == "queued")
            .values({q.c("status").name: "done"})
            .returning(q.c("id"))
        )
        return [str(r[0]) for r in done.all()]


# What config check says last of a team's own table: a redriven job whose row is gone.
GONE_UNKNOWN = (
    "a job that leaves the table: outcome unknown, and a staged redrive halts on it "
    "(whatever deletes rows of this table, a clean-up or a worker, may delete failed jobs "
    'too); set deleted_jobs = "succeeded" if this queue\'s workers delete only jobs that '
    "succeeded"
)


async def test_what_a_worker_table_lacks_is_said_by_config_check(workers: Team) -> None:
    assert await workers.describe() == [
        "statuses of team_jobs.state: pending = queued; in_flight = claimed, running; "
        "succeeded = done; failed = failed; dead = failed_permanently; cancelled = "
        "cancelled; any other value is unknown and never acted on",
        "no column team_jobs.issue_number: no duplicate detection (triage, cancel "
        "--duplicates) and no other rows of the issue in /queue show",
        "no column team_jobs.github_issue_number: nothing: queuebot does not read it",
        "no column team_jobs.job_type: no by-type breakdown in triage; triage --type and "
        "--job-type are usage errors",
        "no column team_jobs.failure_reason: no failure_reason breakdown in triage or "
        "/queue dlq; --failure-reason is a usage error",
        "no column team_jobs.retry_count: a requeue or redrive does not reset the retry "
        "count; /queue dlq shows no retries",
        "no column team_jobs.max_retries: nothing: queuebot does not read it",
        "no column team_jobs.next_attempt_at: a requeue or redrive does not clear next_attempt_at",
        "no column team_jobs.server_preference: nothing: queuebot does not read it",
        "no column team_jobs.started_at: stuck is judged without it (by heartbeat_at, else "
        "claimed_at); a requeue does not clear it",
        "no column team_jobs.heartbeat_at: stuck is judged by started_at, else claimed_at",
        "no column team_jobs.analyst_notes: nothing: queuebot does not read it",
        "no column team_jobs.payload: no job arguments: --args-like (/queue dlq, /queue "
        "redrive, /queue show) is refused",
        GONE_UNKNOWN,
    ]


# -- message_job: messages and jobs alone ---------------------------------------------


@pytest.fixture
async def clips(db_url: str) -> AsyncIterator[Team]:
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    team = await open_team(db_url, QueueConfig(profile="message_job"), MESSAGE_JOB_DDL[dialect])
    yield team
    await team.engine.dispose()


async def add_clips(
    team: Team, rows: list[tuple[str, str]], *, error: str | None = None, minutes: int = 90
) -> list[str]:
    """One job per (message status, job status), each with one message; the job ids."""
    async with team.engine.begin() as conn:
        t = await team.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        jobs = []
        for i, (message_status, job_status) in enumerate(rows):
            job = team.profile.coerce_id(j.c("id"), str(uuid.uuid4()))
            at = START - timedelta(minutes=minutes + i)
            await conn.execute(j.table.insert().values({"id": job, "status": job_status}))
            await conn.execute(
                m.table.insert().values(
                    {
                        "id": team.profile.coerce_id(m.c("id"), str(uuid.uuid4())),
                        "job_id": job,
                        "status": message_status,
                        "available_at": at,
                        "claimed_at": None if message_status == "PENDING" else at,
                        "last_error": error,
                    }
                )
            )
            jobs.append(str(job))
        return jobs


async def clip_statuses(team: Team, jobs: list[str]) -> set[tuple[str, str]]:
    async with team.engine.connect() as conn:
        t = await team.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        keys = [team.profile.coerce_id(j.c("id"), x) for x in jobs]
        rows = await conn.execute(
            sa.select(m.c("status"), j.c("status"))
            .select_from(m.table.join(j.table, j.c("id") == m.c("job_id")))
            .where(j.c("id").in_(keys))
        )
        return {(str(a), str(b)) for a, b in rows.all()}


async def complete_clips(team: Team) -> list[str]:
    async with team.engine.begin() as conn:
        t = await team.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        jobs = [
            r[0]
            for r in (
                await conn.execute(sa.select(m.c("job_id")).where(m.c("status") == "PENDING"))
            ).all()
        ]
        await conn.execute(
            m.table.update().where(m.c("status") == "PENDING").values(status="COMPLETED")
        )
        await conn.execute(j.table.update().where(j.c("id").in_(jobs)).values(status="SUCCEEDED"))
        return [str(plain(x)) for x in jobs]


async def test_messages_and_jobs_alone_are_triaged(clips: Team) -> None:
    dead = await add_clips(clips, [("DLQ", "FAILED")] * 3, error=ERROR)
    await add_clips(
        clips, [("PENDING", "QUEUED"), ("COMPLETED", "SUCCEEDED"), ("PROCESSING", "RUNNING")]
    )

    t = await clips.triage(job_type=None)
    assert counts(t) == {
        "DLQ": (CanonicalState.DEAD, 3),
        "PENDING": (CanonicalState.PENDING, 1),
        "COMPLETED": (CanonicalState.SUCCEEDED, 1),
        "PROCESSING": (CanonicalState.IN_FLIGHT, 1),
    }
    assert t.dead_letters == 3 and await clips.dead_ids() == sorted(dead)
    assert t.dead_letter_jobs == [StatusCount("FAILED", CanonicalState.FAILED, 3)]
    assert t.stuck == 1
    assert t.by_type == [] and t.notes == ["no tenant_id column: no breakdown by tenant"]
    with pytest.raises(UsageError, match="has no tenant_id column"):
        await clips.dead_ids(tenant="acme")
    # a refusal points only at the filters this estate has: no --tenant here
    with pytest.raises(UsageError, match=r"filter with --error-like TEXT\Z"):
        await clips.dead_ids(reason="timeout")
    with pytest.raises(UsageError, match=r"filter /queue dlq with --error-like TEXT\Z"):
        await clips.triage(job_type="render")
    async with clips.estate.connect() as conn:
        shown = await clips.profile.show(conn, job_id=dead[0])
        stuck = await clips.profile.stuck(conn, now=START, limit=10)
    assert shown.events == [] and shown.sections[0].title.startswith("queue message")
    assert shown.events_note is not None and "keeps no job events" in shown.events_note
    assert [(r.note, r.group, r.attempts) for r in stuck.rows] == [
        ("processing for 92m", None, None)
    ]


async def test_messages_and_jobs_alone_are_redriven(clips: Team) -> None:
    dead = await add_clips(clips, [("DLQ", "FAILED")] * 3, error=ERROR)
    view = await clips.services.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="q",
        selector=Selector(ids=tuple(dead[:2])),
        reason="fix deployed",
        actor=ALICE,
    )
    checks = {name: (verdict, detail) for name, verdict, detail in view.checks}
    assert checks["source object exists"] == ("n/a", "this estate keeps no source objects")
    decision = await clips.services.changes.approve(number=view.number, actor=BOB)
    assert decision.view.result is not None
    assert sorted(decision.view.result.changed) == sorted(dead[:2])
    assert decision.view.result.job_events == 0  # no job_events table to write to
    assert await clip_statuses(clips, dead[:2]) == {("PENDING", "QUEUED")}
    assert await clips.dead_ids() == [dead[2]]
    async with clips.estate.connect() as conn:  # counted in queuebot's own redrive log
        redriven = await clips.profile.plan_ops.redrive_counts(
            conn, targets=[Target(id=j, key={}, state="", signature="", row={}) for j in dead]
        )
    assert redriven == dict.fromkeys(dead[:2], 1)


async def add_second_dead_message(team: Team, job: str, *, minutes: int = 30) -> None:
    """Another DLQ message of ``job``, dead-lettered ``minutes`` before START."""
    async with team.engine.begin() as conn:
        t = await team.profile.tables(conn)
        m, j = t["messages"], t["jobs"]
        await conn.execute(
            m.table.insert().values(
                {
                    "id": team.profile.coerce_id(m.c("id"), str(uuid.uuid4())),
                    "job_id": team.profile.coerce_id(j.c("id"), job),
                    "status": "DLQ",
                    "available_at": START - timedelta(minutes=minutes),
                    "claimed_at": START - timedelta(minutes=minutes),
                    "last_error": ERROR,
                }
            )
        )


async def redrive_with_two_messages_on_one_job(team: Team) -> None:
    """A job with two dead letters changes with both of them, and the trail holds."""
    dead = await add_clips(team, [("DLQ", "FAILED")] * 2, error=ERROR)
    await add_second_dead_message(team, dead[0])
    view = await team.services.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="q",
        selector=Selector(ids=tuple(dead)),
        reason="fix deployed",
        actor=ALICE,
    )
    assert view.eligible == 3  # one item per dead letter
    decision = await team.services.changes.approve(number=view.number, actor=BOB)
    assert decision.view.result is not None and not decision.view.result.skipped
    assert sorted(decision.view.result.changed) == sorted(dead)
    assert await clip_statuses(team, dead) == {("PENDING", "QUEUED")}
    assert await team.dead_ids() == []
    async with team.engine.connect() as conn:
        assert (await team.services.audit.verify(conn)).ok


async def test_a_job_with_two_dead_letters_is_redriven_with_both(clips: Team) -> None:
    await redrive_with_two_messages_on_one_job(clips)


async def test_a_jobs_dead_letters_are_never_split_between_two_statements(
    clips: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where rows go through Python in chunks (SQLite here), a chunk boundary between a
    job's two dead letters would let the first chunk requeue the job and the second then
    find it no longer FAILED, leaving its dead letter behind."""
    monkeypatch.setattr(ops, "CHUNK", 1)
    monkeypatch.setattr(ops, "PG_CHUNK", 1)
    await redrive_with_two_messages_on_one_job(clips)


ENUM_DDL = [
    "CREATE TYPE clip_job_status AS ENUM "
    "('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCEL_REQUESTED', 'CANCELLED')",
    "CREATE TYPE clip_message_status AS ENUM ('PENDING', 'PROCESSING', 'COMPLETED', 'DLQ')",
    "CREATE TABLE clip_jobs (id UUID PRIMARY KEY, status clip_job_status NOT NULL)",
    "CREATE TABLE queue_messages (id UUID PRIMARY KEY, job_id UUID NOT NULL "
    "REFERENCES clip_jobs (id), status clip_message_status NOT NULL, "
    "available_at TIMESTAMPTZ NOT NULL, claimed_at TIMESTAMPTZ, last_error TEXT)",
]


async def test_statuses_of_an_enum_type_are_redriven_and_cancelled(db_url: str) -> None:
    """PostgreSQL: a team whose status columns are enums gets the same changes (the
    statements compare and write the statuses as the columns' own type)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("enum types are PostgreSQL's")
    team = await open_team(db_url, QueueConfig(profile="message_job"), ENUM_DDL)
    try:
        await redrive_with_two_messages_on_one_job(team)
        dead = await add_clips(team, [("DLQ", "FAILED")], error=ERROR)
        view = await team.services.changes.request(
            kind=ChangeKind.CANCEL,
            queue="q",
            selector=Selector(ids=tuple(dead)),
            reason="customer withdrew",
            actor=ALICE,
        )
        await team.services.changes.approve(number=view.number, actor=BOB)
        assert await clip_statuses(team, dead) == {("DLQ", "CANCELLED")}
    finally:
        await team.engine.dispose()


async def test_statuses_of_an_enum_type_are_counted_where_succeeded_rows_are_estimated(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the walk of the status index and the dead letters' jobs compare the
    statuses as the enum columns' own type."""
    if not db_url.startswith("postgresql"):
        pytest.skip("enum types are PostgreSQL's")
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    team = await open_team(db_url, QueueConfig(profile="message_job"), ENUM_DDL)
    try:
        rows = [("DLQ", "FAILED")] * 3 + [("DLQ", "SUCCEEDED")] + [("COMPLETED", "SUCCEEDED")] * 5
        await add_clips(team, [*rows, ("PENDING", "QUEUED")], error=ERROR)
        async with team.engine.begin() as conn:
            tables = await team.profile.tables(conn)  # idle: no CONCURRENTLY
            planned = recommended_indexes(team.profile, "sqlite", tables=tables)
            left_out = [p for p in planned if "CREATE INDEX" not in p]
            assert [p.split(" left out: ")[1] for p in left_out] == [
                "there is no events table (job_events) here"  # this team keeps no events
            ]
            for statement in planned:
                if "CREATE INDEX" in statement:
                    await conn.exec_driver_sql(statement)
            await conn.exec_driver_sql("ANALYZE clip_jobs")
            await conn.exec_driver_sql("ANALYZE queue_messages")
        report = await team.triage(job_type=None)
        exact = {(s.status, s.count) for s in report.by_status if not s.estimated}
        assert exact == {("DLQ", 4), ("PENDING", 1)}
        assert [(s.status, s.estimated) for s in report.by_status if s.estimated] == [
            ("COMPLETED", True)
        ]
        assert {(s.status, s.count) for s in report.dead_letter_jobs} == {
            ("FAILED", 3),
            ("SUCCEEDED", 1),
        }
    finally:
        await team.engine.dispose()


async def test_a_staged_redrive_takes_a_job_with_two_dead_letters_whole(clips: Team) -> None:
    """The plan's first wave (a sample of 5) would end between a job's two dead letters
    (the second is the oldest, so it comes last in plan order): the job's dead letters
    are kept together and the wave takes both, instead of leaving the second to a wave
    that finds its job no longer FAILED."""
    dead = await add_clips(clips, [("DLQ", "FAILED")] * 7, error=ERROR)
    await add_second_dead_message(clips, dead[4], minutes=300)
    async with clips.engine.begin() as conn:
        await samples.record(conn, profile=clips.profile, now=START - timedelta(minutes=15))
    plan = await approved_plan(clips)
    waves = []
    for _ in range(4):
        clips.clock.advance(seconds=5)
        await clips.services.scheduler.run_due()
        if done := await complete_clips(clips):
            waves.append(len(done))
    clips.clock.advance(seconds=5)
    await clips.services.scheduler.run_due()
    view = await clips.services.plans.view(number=plan)
    assert await clips.dead_ids() == []
    assert await clip_statuses(clips, dead) == {("COMPLETED", "SUCCEEDED")}
    assert view.state is PlanState.COMPLETED and waves == [6, 2]  # messages: 5 jobs, then 2


async def test_messages_and_jobs_alone_take_a_staged_redrive(
    clips: Team,
) -> None:
    dead = await add_clips(clips, [("DLQ", "FAILED")] * 7, error=ERROR)
    await run_plan(clips, dead, complete=complete_clips)


async def test_what_messages_and_jobs_alone_lack_is_said_by_config_check(clips: Team) -> None:
    lines = await clips.describe()
    assert lines[:2] == [
        "statuses of queue_messages.status: pending = PENDING; in_flight = PROCESSING; "
        "succeeded = COMPLETED; dead = DLQ; any other value is unknown and never acted on",
        "statuses of clip_jobs.status: pending = QUEUED; in_flight = RUNNING, "
        "CANCEL_REQUESTED; succeeded = SUCCEEDED; failed = FAILED; cancelled = CANCELLED; "
        "any other value is unknown and never acted on",
    ]
    assert lines[2:] == [
        "no column queue_messages.attempt_count: a redrive does not reset the message's "
        "attempts; /queue dlq and the stuck report show no tries",
        "no column clip_jobs.asset_id: the source-object check before a redrive is n/a (it "
        "cannot tell a job whose source object is gone), and /queue show has no source "
        "asset",
        "no column clip_jobs.tenant_id: no by-tenant breakdown in triage and no tenant in "
        "listings; --tenant is a usage error",
        "no column clip_jobs.attempt_count: a redrive does not reset the job's attempts",
        "no column clip_jobs.progress_percent: a redrive does not reset progress; the stuck "
        "report shows none",
        "no column clip_jobs.error_message: a redrive does not clear the job's error",
        "no column clip_jobs.started_at: nothing: queuebot does not read it",
        "no column clip_jobs.finished_at: a redrive does not clear finished_at",
        "no column clip_jobs.payload: no job arguments: --args-like (/queue dlq, /queue "
        "redrive, /queue show) is refused",
        "no events table (job_events): no job events: /queue show lists none, a change "
        "writes none, and earlier redrives are counted in queuebot's own redrive log",
        "no assets table (video_assets): the source-object check before a redrive is n/a "
        "(it cannot tell a job whose source object is gone), and /queue show has no "
        "source asset",
        GONE_UNKNOWN,
    ]


# -- a staged redrive over either estate --------------------------------------------------


async def run_plan(team: Team, dead: list[str], *, complete: Any) -> None:
    """A plan over every dead job, approved by a second person: a sample of 5, then the
    rest, each wave completed by the worker, until the plan completes."""
    async with team.engine.begin() as conn:  # a flat dead-letter count 15 minutes ago
        await samples.record(conn, profile=team.profile, now=START - timedelta(minutes=15))
    plan = await approved_plan(team)
    waves = []
    for _ in range(4):
        team.clock.advance(seconds=5)
        await team.services.scheduler.run_due()
        done = await complete(team)
        if done:
            waves.append(len(done))
    assert waves == [5, len(dead) - 5]
    team.clock.advance(seconds=5)
    await team.services.scheduler.run_due()
    view = await team.services.plans.view(number=plan)
    assert view.state is PlanState.COMPLETED and view.succeeded == len(dead)
    assert await team.dead_ids() == []


async def approved_plan(team: Team) -> int:
    view = await team.services.changes.request(
        kind=ChangeKind.PLAN,
        queue="q",
        selector=Selector(all_dead=True),
        reason="fix deployed",
        actor=ALICE,
    )
    assert view.state is RequestState.PENDING, view
    decision = await team.services.changes.approve(number=view.number, actor=BOB)
    assert decision.view.result is not None and decision.view.result.plan is not None
    return decision.view.result.plan


# -- the team's own status values ---------------------------------------------------------


async def test_a_mapped_worker_status_is_dead_listed_and_redriven(db_url: str) -> None:
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    config = QueueConfig(
        profile="worker_queue",
        table="team_jobs",
        columns=WORKER_COLUMNS,
        statuses={"dead": ["DEAD_LETTER"], "in_flight": ["PICKED"]},
    )
    team = await open_team(db_url, config, [WORKER_DDL[dialect]])
    try:
        mapped = await add_worker_rows(team, [failed_row("DEAD_LETTER")] * 2)
        failed = await add_worker_rows(team, [failed_row()])
        odd = await add_worker_rows(team, [failed_row("WEIRD")])
        picked = await add_worker_rows(
            team, [{"status": "PICKED", "queued_at": AN_HOUR_AGO, "claimed_at": AN_HOUR_AGO}]
        )

        t = await team.triage(job_type=None)
        assert counts(t) == {
            "DEAD_LETTER": (CanonicalState.DEAD, 2),
            "failed": (CanonicalState.FAILED, 1),
            "WEIRD": (CanonicalState.UNKNOWN, 1),  # shown as unknown, never acted on
            "PICKED": (CanonicalState.IN_FLIGHT, 1),
        }
        assert t.count_in(CanonicalState.DEAD) == 2 and t.dead_letters == 3
        assert t.stuck == 1  # a mapped in-flight status is judged like running
        assert await team.dead_ids() == sorted(mapped + failed)
        assert (await team.describe())[0] == (
            "statuses of team_jobs.state: pending = queued; in_flight = claimed, running, "
            "PICKED (PICKED from [statuses]); succeeded = done; failed = failed; dead = "
            "failed_permanently, DEAD_LETTER (DEAD_LETTER from [statuses]); cancelled = "
            "cancelled; any other value is unknown and never acted on"
        )

        view = await team.services.changes.request(
            kind=ChangeKind.REDRIVE,
            queue="q",
            selector=Selector(ids=(*mapped, *odd, *picked)),
            reason="fix deployed",
            actor=ALICE,
        )
        assert view.eligible == 2
        why = {i.id: i.why for i in view.ineligible}
        assert why == {
            odd[0]: "WEIRD: a status queuebot does not know; never acted on",
            picked[0]: "PICKED: a worker holds it right now",
        }
        decision = await team.services.changes.approve(number=view.number, actor=BOB)
        assert decision.view.result is not None
        assert sorted(decision.view.result.changed) == sorted(mapped)
        after = await worker_statuses(team, mapped + odd)
        assert [after[i][0] for i in mapped + odd] == ["queued", "queued", "WEIRD"]
    finally:
        await team.engine.dispose()


async def test_a_mapped_dead_letter_of_a_message_job_is_redriven_and_rolled_back(
    db_url: str,
) -> None:
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    config = QueueConfig(
        profile="message_job", statuses={"dead": ["DLQ", "DEAD_LETTER"], "failed": ["ERRORED"]}
    )
    team = await open_team(db_url, config, MESSAGE_JOB_DDL[dialect])
    try:
        mapped = await add_clips(team, [("DEAD_LETTER", "ERRORED")] * 2, error=ERROR)
        shipped = await add_clips(team, [("DLQ", "FAILED")], error=ERROR)
        odd = await add_clips(team, [("DEAD_LETTER", "ODD")], error=ERROR)

        t = await team.triage(job_type=None)
        assert counts(t) == {
            "DEAD_LETTER": (CanonicalState.DEAD, 3),
            "DLQ": (CanonicalState.DEAD, 1),
        }
        assert t.dead_letters == 4 and await team.dead_ids() == sorted(mapped + shipped + odd)
        assert {(s.status, s.canonical, s.count) for s in t.dead_letter_jobs} == {
            ("ERRORED", CanonicalState.FAILED, 2),
            ("FAILED", CanonicalState.FAILED, 1),
            ("ODD", CanonicalState.UNKNOWN, 1),
        }

        # Straight through the profile: freeze, keep the originals, redrive, roll back.
        profile, ops = team.profile, team.profile.plan_ops
        async with team.engine.begin() as conn:
            frozen = await profile.changes.freeze(
                conn, action=Action.REDRIVE, selector=Selector(ids=(*mapped, *odd))
            )
            assert sorted(x.id for x in frozen.targets) == sorted(mapped)
            assert [(i.id, i.why) for i in frozen.ineligible] == [
                (odd[0], "ODD: job is not failed")
            ]
            refs = [ItemRef(x.id, x.part, {}) for x in frozen.targets]
            originals = await ops.originals(conn, items=refs)
            applied = await profile.changes.apply(
                conn,
                action=Action.REDRIVE,
                targets=frozen.targets,
                now=START,
                note="n",
                duplicates=False,
            )
            assert sorted(applied.changed) == sorted(mapped)
        assert await clip_statuses(team, mapped) == {("PENDING", "QUEUED")}
        async with team.engine.begin() as conn:
            back = await ops.rollback(
                conn,
                items=[ItemRef(r.job_id, r.part, originals[r.ref]) for r in refs],
                now=START,
                note="the fix did not hold",
            )
        assert sorted(back) == sorted(mapped)
        assert await clip_statuses(team, mapped) == {("DEAD_LETTER", "ERRORED")}  # its own

        assert await team.change(ChangeKind.REDRIVE, [*mapped, *shipped]) == sorted(
            mapped + shipped
        )
        assert await clip_statuses(team, mapped + shipped) == {("PENDING", "QUEUED")}
        assert await team.dead_ids() == odd
    finally:
        await team.engine.dispose()


async def test_a_change_never_writes_a_status_the_mapping_leaves_out(db_url: str) -> None:
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    waiting = {"pending": ["WAITING"]}  # the team's table may not take 'queued'
    config = QueueConfig(
        profile="worker_queue", table="team_jobs", columns=WORKER_COLUMNS, statuses=waiting
    )
    team = await open_team(db_url, config, [WORKER_DDL[dialect]])
    try:
        failed = await add_worker_rows(team, [failed_row()])
        for kind in (ChangeKind.REQUEUE, ChangeKind.REDRIVE):
            with pytest.raises(PreconditionFailed, match="add 'queued' there if your table"):
                await team.change(kind, failed)
        assert await team.change(ChangeKind.CANCEL, failed) == failed  # cancelled: unmapped
        lines = await team.describe()
        assert (
            "requeue is off: it writes pending as 'queued', and [statuses] pending lists "
            "'WAITING' but not 'queued'; add 'queued' there if your table takes it"
        ) in lines
        assert (await worker_statuses(team, failed))[failed[0]][0] == "cancelled"
    finally:
        await team.engine.dispose()


def test_a_mapping_cannot_move_a_profile_value_or_name_a_state_it_lacks() -> None:
    moved = QueueConfig(profile="worker_queue", statuses={"dead": ["failed"]})
    with pytest.raises(ConfigError, match="'failed' is worker_queue's own value for failed"):
        WorkerQueueProfile("q", moved)
    fine = QueueConfig(profile="message_job", statuses={"dead": ["FAILED"]})  # a message value
    assert fine.statuses == {"dead": ["FAILED"]}
    lacking = QueueConfig.model_construct(  # type: ignore[call-arg]
        profile="single_table", statuses={"failed": ["ERRORED"]}
    )
    with pytest.raises(ConfigError, match="profile single_table has no failed state"):
        SingleTableProfile("q", lacking)


# -- the shipped estate: every column there -----------------------------------------------


async def test_config_check_of_the_demo_estate_says_nothing_is_turned_off(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=START)
        mapped = QueueConfig(profile="worker_queue", statuses={"dead": ["DEAD_LETTER"]})
        estate = Estate(
            engine=engine, queues={"clips": QueueConfig(profile="message_job"), "workers": mapped}
        )
        async with estate.connect() as conn:
            clips = await estate.profile("clips").describe(conn)
            workers = await estate.profile("workers").describe(conn)
        assert (
            clips[2:]
            == workers[1:]
            == ["every optional table and column is present: nothing is turned off", GONE_UNKNOWN]
        )
        assert "DEAD_LETTER (DEAD_LETTER from [statuses])" in workers[0]
    finally:
        await engine.dispose()


# -- a team's status column of an enum type without queuebot's values -----------------------

# The team's own table: its state is an enum of four labels, none of them 'claimed', 'done',
# 'failed_permanently' or 'cancelled'; its dead rows are 'dead', mapped in [statuses].
TEAM_ENUM_DDL = [
    "CREATE TYPE job_state AS ENUM ('queued', 'running', 'failed', 'dead')",
    "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, state job_state NOT NULL, last_error TEXT, "
    "enqueued_at TIMESTAMPTZ NOT NULL, locked_at TIMESTAMPTZ, attempts INTEGER NOT NULL "
    "DEFAULT 0, kind TEXT)",
]
TEAM_ENUM_CONFIG = QueueConfig(
    profile="worker_queue",
    table="jobs",
    columns=REPORT_COLUMNS,
    statuses={"dead": ["dead"]},
)


@pytest.mark.postgres
async def test_an_enum_status_column_without_the_profiles_values_is_read_and_changed(
    pg_url: str,
) -> None:
    """Every read and change compares only labels the enum type has (comparing another is
    an error in PostgreSQL), and a change that would write a label the type lacks is
    refused, naming the label."""
    team = await open_team(pg_url, TEAM_ENUM_CONFIG, TEAM_ENUM_DDL)
    try:
        failed = await add_worker_rows(team, [failed_row(minutes=90 + i) for i in range(2)])
        dead = await add_worker_rows(team, [failed_row("dead")])
        await add_worker_rows(
            team,
            [
                {"status": "queued", "queued_at": START - timedelta(minutes=20)},
                {"status": "running", "queued_at": AN_HOUR_AGO, "claimed_at": AN_HOUR_AGO},
            ],
        )

        t = await team.triage(job_type=None)
        assert counts(t) == {
            "failed": (CanonicalState.FAILED, 2),
            "dead": (CanonicalState.DEAD, 1),
            "queued": (CanonicalState.PENDING, 1),
            "running": (CanonicalState.IN_FLIGHT, 1),
        }
        assert t.dead_letters == 3 and t.stuck == 1
        assert t.oldest_pending_age == timedelta(minutes=20)
        assert await team.dead_ids() == sorted(failed + dead)
        assert await team.dead_ids(job_type="render") == []
        async with team.estate.connect() as conn:
            stuck = await team.profile.stuck(conn, now=START, limit=10)
            shown = await team.profile.show(conn, job_id=dead[0])
            assert await team.profile.dead_rows(conn) == 3
        assert [r.status for r in stuck.rows] == ["running"]
        assert shown.status == "dead" and shown.canonical is CanonicalState.DEAD
        lines = await team.describe()
        assert lines[0] == (
            "statuses of jobs.state: pending = queued; in_flight = running; failed = failed; "
            "dead = dead (dead from [statuses]); any other value is unknown and never acted "
            "on; its type job_state has no 'claimed', 'done', 'failed_permanently' or "
            "'cancelled', so those statuses match nothing"
        )
        assert (
            "cancel is off: it writes cancelled as 'cancelled', a label the type job_state "
            "of jobs.state lacks; add it (ALTER TYPE job_state ADD VALUE 'cancelled') if "
            "your workers may see it: [queue.statuses] maps the values queuebot reads, it "
            "does not change the ones it writes"
        ) in lines

        with pytest.raises(PreconditionFailed, match="'cancelled', a label the type job_state"):
            await team.change(ChangeKind.CANCEL, failed[:1])
        assert await team.change(ChangeKind.REQUEUE, failed[:1]) == failed[:1]
        assert await team.change(ChangeKind.REDRIVE, dead) == dead
        after = await worker_statuses(team, [*failed, *dead])
        assert [after[i][0] for i in [*failed, *dead]] == ["queued", "failed", "queued"]
        assert await team.dead_ids() == failed[1:]
        async with team.engine.begin() as conn:  # a staged redrive's counts and candidates
            await samples.record(conn, profile=team.profile, now=START - timedelta(minutes=15))
        assert await approved_plan(team)
    finally:
        await team.engine.dispose()


# The same team table with a text status, on either database: what the replies say of
# columns it lacks (no issue_number, no failure_reason, no heartbeat_at or started_at; the
# claim time is locked_at).
TEAM_TEXT_DDL = {
    "postgresql": "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, "
    "last_error TEXT, enqueued_at TIMESTAMPTZ NOT NULL, locked_at TIMESTAMPTZ, attempts "
    "INTEGER NOT NULL DEFAULT 0, kind TEXT)",
    "sqlite": "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL, "
    "last_error TEXT, enqueued_at DATETIME NOT NULL, locked_at DATETIME, attempts INTEGER "
    "NOT NULL DEFAULT 0, kind TEXT)",
}


async def test_replies_say_only_what_the_team_tables_columns_support(db_url: str) -> None:
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    team = await open_team(db_url, TEAM_ENUM_CONFIG, [TEAM_TEXT_DDL[dialect]])
    try:
        await add_worker_rows(team, [failed_row(minutes=90 + i) for i in range(2)])
        await add_worker_rows(
            team,
            [
                {"status": "queued", "queued_at": START - timedelta(minutes=20)},
                {"status": "running", "queued_at": AN_HOUR_AGO, "claimed_at": AN_HOUR_AGO},
            ],
        )

        triage = await team.reply(TriageCommand())
        assert "duplicates: " not in triage  # no count beside "not detected"
        assert "no issue_number column: duplicates are not detected" in triage
        assert "no heartbeat_at or started_at column: stuck is judged by locked_at" in triage
        assert "claimed_at" not in triage
        assert "None" not in triage  # rows without a kind
        assert "(no job type)" in triage

        stuck = await team.reply(Stuck())
        assert "running, locked 1h00m ago (locked_at); no heartbeat or start time kept" in (stuck)
        assert "since it started" not in stuck

        with pytest.raises(UsageError) as refused:
            await team.reply(Dlq(tenant="acme"))
        assert str(refused.value) == (
            "queue 'q' (worker_queue) has no tenants; select by --job-type or --error-like instead"
        )
        with pytest.raises(UsageError) as refused:
            await team.reply(Dlq(reason="timeout"))
        assert "failure" not in str(refused.value).split(";")[1]  # the way out works here
        assert "--job-type or --error-like" in str(refused.value)
    finally:
        await team.engine.dispose()
