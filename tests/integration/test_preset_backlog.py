"""graphile-worker and Que delete a job when it succeeds, so a large table of theirs is a
backlog: on a whole table of 500,000 jobs or more (by its statistics) triage counts the
waiting jobs from a sample of its pages, marked ``≈`` with the sample's size, and counts the
dead and running jobs, the stuck ones and the oldest waiting one exactly; ``--exact``
counts everything, and a smaller table is counted exactly.

"Large" is lowered here (``estimate.ESTIMATE_FROM``), and the sample's aim
(``estimate.SAMPLE_ROWS``) with it where a test wants a sample of part of the table: the
statements are the ones a table of millions gets."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from bot.slack.render import blocks
from commands.context import Invocation
from services.db import create_engine
from services.estate import estimate
from services.estate.model import CanonicalState, Triage
from tests.integration.preset_adapters import (
    GraphileWorkerAdapter,
    PresetAdapter,
    ProcrastinateAdapter,
    QueAdapter,
)
from tests.integration.support import START, demo_app
from tests.integration.test_presets import ERROR, World, open_world

pytestmark = pytest.mark.postgres
BACKLOG = [GraphileWorkerAdapter, QueAdapter]
WAITING = {"graphile-worker": "waiting", "que": "ready"}
RETRYING = {"graphile-worker": "retrying", "que": "errored"}
DEAD = {"graphile-worker": "dead", "que": "expired"}


async def _fill(world: World, *, ready: int, retrying: int) -> None:
    """``ready`` jobs waiting to run and ``retrying`` ones waiting for the system's own
    retry, of two job types, enqueued over the last days (the oldest 3 days ago)."""
    async with world.engine.begin() as conn:
        if world.profile.name == "que":
            await conn.execute(
                sa.text(
                    "INSERT INTO que_jobs (job_class, run_at, error_count, last_error_message)"
                    " SELECT CASE WHEN i % 3 = 0 THEN 'Report::Job' ELSE 'Mail::Job' END,"
                    " CAST(:start AS timestamptz) - i * interval '1 minute',"
                    " CASE WHEN i > :ready THEN 2 ELSE 0 END,"
                    " CASE WHEN i > :ready THEN 'Net::ReadTimeout' END"
                    " FROM generate_series(1, :n) AS i"
                ),
                {"start": START, "ready": ready, "n": ready + retrying},
            )
            return
        await conn.execute(
            sa.text(
                "SELECT graphile_worker.add_job(CASE WHEN i % 3 = 0 THEN 'report' ELSE 'mail'"
                " END, '{}'::json, run_at => CAST(:start AS timestamptz) - i * interval"
                " '1 minute', max_attempts => 5) FROM generate_series(1, :n) AS i"
            ),
            {"start": START, "n": ready + retrying},
        )
        await conn.execute(
            sa.text(
                "UPDATE graphile_worker._private_jobs SET attempts = 1, last_error = 'timeout'"
                " WHERE id IN (SELECT id FROM graphile_worker._private_jobs"
                " WHERE max_attempts = 5 ORDER BY id DESC LIMIT :n)"
            ),
            {"n": retrying},
        )


async def _analyse(world: World) -> str:
    """VACUUM ANALYZE the table the statistics are read from; its name."""
    async with world.estate.connect() as conn:
        table = world.profile.sample_table(await world.profile.tables(conn))  # type: ignore[attr-defined]
        name = conn.dialect.identifier_preparer.format_table(table)
    async with world.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql(f"VACUUM ANALYZE {name}")  # a name from the profile
    return str(name)


async def _triage(world: World, *, exact: bool = False) -> Triage:
    async with world.estate.connect() as conn:
        return await world.profile.triage(conn, now=START, since=None, job_type=None, exact=exact)


def _counts(found: Triage) -> dict[str, tuple[int, bool]]:
    return {s.status: (s.count, s.estimated) for s in found.by_status}


@pytest.fixture(params=BACKLOG, ids=lambda a: a.profile_class.name)
def kind(request: pytest.FixtureRequest) -> type[PresetAdapter]:
    return request.param  # type: ignore[no-any-return]


async def test_a_large_backlog_counts_its_waiting_jobs_in_a_sample_marked_with_its_size(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, kind: type[PresetAdapter]
) -> None:
    """A sample as large as the table draws every job: the same numbers as an exact
    triage, but the waiting ones (by state and by job type) marked as from a sample, of
    every job; the dead and running jobs, the stuck count, the oldest waiting job and the
    dead jobs' errors are counted, not estimated."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    async for world in open_world(pg_url, kind):
        await _fill(world, ready=120, retrying=40)
        await _analyse(world)
        found, counted = await _triage(world), await _triage(world, exact=True)
        name = world.profile.name
        assert {s: n for s, (n, _) in _counts(found).items()} == {
            s: n for s, (n, _) in _counts(counted).items()
        }
        guessed = {s for s, (_, rough) in _counts(found).items() if rough}
        kept = {"finished"} if name == "que" else set()  # Que's jobs that keep themselves
        assert guessed == {WAITING[name], RETRYING[name], *kept}
        assert _counts(found)[DEAD[name]] == (4, False)
        assert (found.sampled_rows, found.sampled_of) == (counted.total, counted.total)
        assert (counted.sampled_rows, [s for s in counted.by_status if s.estimated]) == (0, [])
        # the oldest waiting job, read from the system's index of them, is exact
        assert (
            found.oldest_pending_at == counted.oldest_pending_at == START - timedelta(minutes=160)
        )
        assert (found.stuck, found.by_signature) == (counted.stuck, counted.by_signature)
        assert found.stuck == (1 if kind.shows_running else 0)
        sampled = {CanonicalState.PENDING, CanonicalState.SUCCEEDED}
        for tc in found.by_type:  # by job type, the waiting jobs are marked, the dead not
            assert set(tc.estimated) == sampled & set(tc.by_state), tc
        assert {tc.key: tc.by_state for tc in found.by_type} == {
            tc.key: tc.by_state for tc in counted.by_type
        }


SEED = 42


async def _drawn(world: World, table: str, percent: float, where: str = "true") -> int:
    """How many of the table's jobs (``where``) the sample of ``percent`` of its pages
    with the seed the test gives triage reads."""
    async with world.engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                f"SELECT count(*) FROM {table} TABLESAMPLE SYSTEM (:p) REPEATABLE (:seed)"
                f" WHERE {where}"
            ),
            {"p": percent, "seed": SEED},
        )
        return int(found.scalar_one())


STATE_WHERE = {  # each system's waiting states on its own table
    ("graphile-worker", "waiting"): "locked_at IS NULL AND attempts < max_attempts"
    " AND last_error IS NULL",
    ("graphile-worker", "retrying"): "locked_at IS NULL AND attempts < max_attempts"
    " AND last_error IS NOT NULL",
    ("que", "ready"): "expired_at IS NULL AND finished_at IS NULL AND error_count = 0",
    ("que", "errored"): "expired_at IS NULL AND finished_at IS NULL AND error_count > 0",
    ("que", "finished"): "expired_at IS NULL AND finished_at IS NOT NULL",
}


async def test_a_sample_of_part_of_the_backlog_is_scaled_and_the_dead_are_counted_whole(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, kind: type[PresetAdapter]
) -> None:
    """A sample of about half the table's pages: each waiting state's count is its jobs on
    the sampled pages scaled by the share of pages read, with its error measured from
    those pages; the dead jobs (a dozen, on pages read or not) are all counted, as are the
    running and stuck ones and the dead jobs' errors; --exact counts everything."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    monkeypatch.setattr(estimate, "seed", lambda: SEED)
    async for world in open_world(pg_url, kind):
        await _fill(world, ready=600, retrying=200)
        async with world.engine.begin() as conn:
            await world.adapter.add(conn, now=START, dead=8, error=ERROR)
        table = await _analyse(world)
        async with world.estate.connect() as conn:
            plan = await estimate.sample_plan(conn, world.profile.sample_table(  # type: ignore[attr-defined]
                await world.profile.tables(conn)
            ))  # fmt: skip
        assert plan is not None
        monkeypatch.setattr(estimate, "SAMPLE_ROWS", round(plan.rows / 2))
        percent = min(100.0, 100.0 * round(plan.rows / 2) / plan.rows)
        found, counted = await _triage(world), await _triage(world, exact=True)
        name = world.profile.name
        exact = {s: n for s, (n, _) in _counts(counted).items()}
        assert _counts(found)[DEAD[name]] == (exact[DEAD[name]], False) == (12, False)
        assert await _drawn(world, table, percent) == found.sampled_rows < counted.total
        assert found.sampled_percent == percent
        for state in (WAITING[name], RETRYING[name]):
            drawn = await _drawn(world, table, percent, STATE_WHERE[name, state])
            n, rough = _counts(found)[state]
            assert (n, rough) == (round(drawn * 100 / percent), True), state
            if n:  # an error measured from the pages read
                assert 0 < found.sample_errors[state] < 1, state
        assert found.stuck == counted.stuck == (1 if kind.shows_running else 0)
        assert found.oldest_pending_at == counted.oldest_pending_at
        assert found.by_signature == counted.by_signature
        assert found.by_signature[0].count == 12


async def test_a_backlog_below_the_threshold_is_counted_exactly(
    pg_url: str, kind: type[PresetAdapter]
) -> None:
    """Below 500,000 jobs by the statistics, every job is counted."""
    async for world in open_world(pg_url, kind):
        await _fill(world, ready=60, retrying=20)
        await _analyse(world)
        found, counted = await _triage(world), await _triage(world, exact=True)
        assert found.sampled_rows == 0
        assert [s for s in found.by_status if s.estimated] == []
        assert _counts(found) == _counts(counted)


async def test_the_reply_marks_the_sampled_counts_and_exact_counts_everything(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the command as a person types it: the waiting jobs' counts (by state and by
    job type) carry ``≈``, the note names the sample's size and how far off a count may
    be, the dead letters are exact, in the console's text and Slack's blocks alike; with
    --exact nothing is marked."""
    if not db_url.startswith("postgresql"):
        pytest.skip("Que is a PostgreSQL system")
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    engine = create_engine(db_url)
    try:
        async with engine.begin() as conn:
            await QueAdapter.create(conn)
            await conn.execute(
                sa.text(
                    "INSERT INTO que_jobs (job_class, run_at, error_count, last_error_message,"
                    " expired_at) SELECT CASE WHEN i % 4 = 0 THEN 'Report::Job'"
                    " ELSE 'Mail::Job' END, CAST(:start AS timestamptz) - i * interval"
                    " '1 minute', CASE WHEN i <= 5 THEN 16 ELSE 0 END, CASE WHEN i <= 5"
                    " THEN 'Net::ReadTimeout: read timed out after 30 s' END, CASE WHEN"
                    " i <= 5 THEN CAST(:start AS timestamptz) END"
                    " FROM generate_series(1, 300) AS i"
                ),
                {"start": START},
            )
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE que_jobs")
    finally:
        await engine.dispose()
    extra = '\n[queues.backlog]\npreset = "que"\n\n[reads]\nfresh_seconds = 0\n'
    async with demo_app(db_url, tmp_path, extra_config=extra) as app:
        person = app.directory.by_name("alice")
        inv = Invocation(person=person, platform="console", account="alice")
        reply = (await app.router.handle_line("/queue triage --queue backlog", inv)).message
        text = render_message(reply)
        slack = str(blocks(reply))
        assert "≈295" in text and "≈295" in slack  # the ready jobs, all 295 drawn
        assert "a sample of 300 of about 300 jobs (100% of the table's pages)" in text
        assert "a sample of 300 of about 300 jobs (100% of the table's pages)" in slack
        assert "ready ±0.0%" in text  # every page read: nothing to be off by
        assert "/queue triage --exact" in text
        assert "5 dead letters (5 expired)" in reply.summary  # exact, unmarked
        assert "≈221" in text  # Mail::Job's ready jobs, by job type
        exact = await app.router.handle_line("/queue triage --queue backlog --exact", inv)
        counted = render_message(exact.message)
        assert "≈" not in counted and "a sample of" not in counted
        assert "295" in counted


async def test_procrastinates_one_pass_counts_as_an_exact_triage_does(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Procrastinate keeps no error text, so where most of a large table succeeded its
    one pass only counts (grouped as it reads, reading a job's events for its wait and
    its start alone): every count but the estimated one, the stuck job and the oldest
    waiting one are what an exact triage says."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)
    async for world in open_world(pg_url, ProcrastinateAdapter):
        async with world.engine.begin() as conn:
            await world.adapter.add(conn, now=START, dead=0, error=ERROR, done=80, pending=3)
        await _analyse(world)
        found, counted = await _triage(world), await _triage(world, exact=True)
        assert _counts(found)["succeeded"] == (82, True)  # the statistics are fresh here
        exact = {s: n for s, (n, rough) in _counts(counted).items()}
        assert {s: n for s, (n, _) in _counts(found).items()} == exact
        assert (found.stuck, counted.stuck) == (1, 1)
        assert found.oldest_pending_at == counted.oldest_pending_at == START - timedelta(minutes=30)
        done = CanonicalState.SUCCEEDED  # left out by job type where estimated
        assert {tc.key: tc.by_state for tc in found.by_type} == {
            tc.key: {c: n for c, n in tc.by_state.items() if c != done} for tc in counted.by_type
        }
