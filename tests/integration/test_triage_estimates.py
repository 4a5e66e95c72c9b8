"""On a large PostgreSQL table triage estimates the succeeded rows and counts every other
row exactly; the reply marks the estimate, and --exact counts everything.

"Large" is lowered here (``estimate.ESTIMATE_FROM``) so that the demo estate qualifies;
the statements are the ones a table of millions gets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.bootstrap import App
from commands.context import Invocation
from services.estate import estimate
from services.estate.indexes import recommended_indexes
from services.message import Fields, Message, Table, Text
from tests.integration.support import demo_app

# demo_app over a copy of the template holding the demo estate built at START.
pytestmark = pytest.mark.demo_db


@pytest.fixture
async def app(db_url: str, tmp_path: Path) -> AsyncIterator[App]:
    async with demo_app(db_url, tmp_path, extra_config="\n[reads]\nfresh_seconds = 0\n") as built:
        yield built


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table with statistics counts as large."""
    monkeypatch.setattr(estimate, "ESTIMATE_FROM", 1)


async def triage(app: App, line: str) -> Message:
    person = app.directory.by_name("alice")
    reply = await app.router.handle_line(
        line, Invocation(person=person, platform="console", account="alice")
    )
    return reply.message


def table(message: Message, title: str) -> dict[str, tuple[str, ...]]:
    """A reply table's rows by their first cell."""
    (found,) = [b for b in message.blocks if isinstance(b, Table) and b.title == title]
    return {row[0]: row[1:] for row in found.rows}


def fact(message: Message, name: str) -> str:
    """One of the reply's fields (dead letters, stuck, duplicates...)."""
    (fields,) = [b for b in message.blocks if isinstance(b, Fields)]
    return dict(fields.items)[name]


def texts(message: Message) -> str:
    return "\n".join(b.text for b in message.blocks if isinstance(b, Text))


async def sql(app: App, query: str) -> list[sa.Row[object]]:
    async with app.state_engine.begin() as conn:
        result = await conn.execute(sa.text(query))
        return list(result.all()) if result.returns_rows else []


async def analyze(app: App, *tables: str) -> None:
    for name in tables:
        await sql(app, f"ANALYZE {name}")


async def indexed(app: App, queue: str) -> None:
    """The queue's recommended indexes (without CONCURRENTLY: the tests' tables are idle).
    An estimate needs an index that leads with the status column."""
    for statement in recommended_indexes(app.estate.profile(queue), "sqlite"):
        await sql(app, statement)


async def counts_of(app: App, query: str) -> dict[str, int]:
    """(status, count) rows as a map, a NULL status under "None" as triage shows it."""
    return {str(status): int(n) for status, n in await sql(app, query)}


def numbers(rows: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """A status table's exact counts."""
    return {s: int(v[1].replace(",", "")) for s, v in rows.items()}


def only_postgres(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("estimates come from PostgreSQL's statistics")


async def test_worker_queue_estimates_done_and_counts_the_rest_exactly(
    app: App, db_url: str, large: None
) -> None:
    only_postgres(db_url)
    # A status nobody mapped, and rows without a status, are counted exactly too, not
    # folded into the estimate.
    await sql(app, "ALTER TABLE dev_r_worker_queue DROP CONSTRAINT dev_r_worker_queue_status_check")
    await sql(app, "ALTER TABLE dev_r_worker_queue ALTER COLUMN status DROP NOT NULL")
    await sql(
        app,
        "UPDATE dev_r_worker_queue SET status = 'paused' WHERE id IN "
        "(SELECT id FROM dev_r_worker_queue WHERE status = 'queued' ORDER BY id LIMIT 2)",
    )
    await sql(
        app,
        "UPDATE dev_r_worker_queue SET status = NULL WHERE id = "
        "(SELECT min(id) FROM dev_r_worker_queue WHERE status = 'cancelled')",
    )
    await indexed(app, "workers")
    await analyze(app, "dev_r_worker_queue")
    counts = await counts_of(app, "SELECT status, count(*) FROM dev_r_worker_queue GROUP BY 1")
    assert counts["paused"] == 2 and counts["None"] == 1

    reply = await triage(app, "/queue triage --queue workers")
    by_status = table(reply, "By status")
    for status, n in counts.items():
        if status != "done":
            assert by_status[status][1] == f"{n:,}", status  # exact, unmarked
    assert by_status["paused"][0] == "unknown" and by_status["None"][0] == "unknown"
    # ANALYZE read this small table whole, so its statistics, and the estimate, are exact
    assert by_status["done"][1] == f"≈{estimate.rounded(counts['done']):,}"
    assert reply.summary.startswith("Queue workers: ≈")
    dead = counts["failed"] + counts["failed_permanently"]
    assert f"; {dead:,} dead letters" in reply.summary
    assert "≈ marks an estimate" in texts(reply) and "/queue triage --exact" in texts(reply)
    titled = [b for b in reply.blocks if isinstance(b, Table) and b.title is not None]
    assert any(
        b.title == "By job type, succeeded rows left out (estimated above)"
        and "succeeded" not in b.columns
        for b in titled
    )

    exact = await triage(app, "/queue triage --queue workers --exact")
    assert numbers(table(exact, "By status")) == counts
    assert "≈" not in exact.summary and "≈ marks" not in texts(exact)
    # the duplicates, probed in two halves of the issues where estimating, add up the same
    duplicates = fact(reply, "duplicates")
    assert (
        duplicates
        == fact(exact, "duplicates")
        == "3 issues queued twice, 2 queued beside an active row"
    )

    # One job type, or a window, is counted exactly: ranges of their own indexes.
    of_type = await triage(app, "/queue triage --queue workers --type dev-issue")
    assert numbers(table(of_type, "By status")) == await counts_of(
        app,
        "SELECT status, count(*) FROM dev_r_worker_queue WHERE job_type = 'dev-issue' GROUP BY 1",
    )
    recent = await triage(app, "/queue triage --queue workers --since 7d")
    assert "≈" not in of_type.summary and "≈" not in recent.summary


async def test_message_job_estimates_completed_and_counts_dead_letters_jobs_exactly(
    app: App, db_url: str, large: None
) -> None:
    only_postgres(db_url)
    # One dead letter whose job already succeeded (found by its job's primary key, not
    # among the failed jobs), and one whose job has no status (counted under no status).
    await sql(app, "ALTER TABLE clip_jobs DROP CONSTRAINT clip_jobs_status_check")
    await sql(app, "ALTER TABLE clip_jobs ALTER COLUMN status DROP NOT NULL")
    await sql(
        app,
        "UPDATE clip_jobs SET status = 'SUCCEEDED' WHERE id = (SELECT job_id FROM "
        "queue_messages WHERE status = 'DLQ' ORDER BY id LIMIT 1)",
    )
    await sql(
        app,
        "UPDATE clip_jobs SET status = NULL WHERE id = (SELECT job_id FROM "
        "queue_messages WHERE status = 'DLQ' ORDER BY id DESC LIMIT 1)",
    )
    await indexed(app, "clips")
    await analyze(app, "queue_messages", "clip_jobs")
    messages = await counts_of(app, "SELECT status, count(*) FROM queue_messages GROUP BY 1")
    jobs = await counts_of(app, "SELECT status, count(*) FROM clip_jobs GROUP BY 1")
    their_jobs = await sql(
        app,
        "SELECT coalesce(j.status, 'None'), count(*) FROM queue_messages m "
        "JOIN clip_jobs j ON j.id = m.job_id WHERE m.status = 'DLQ' "
        "GROUP BY 1 ORDER BY 2 DESC, 1",
    )
    assert len(their_jobs) == 3

    reply = await triage(app, "/queue triage --queue clips")
    by_status = table(reply, "By message status")
    by_job = table(reply, "By job status")
    for status, n in messages.items():
        if status != "COMPLETED":
            assert by_status[status][1] == f"{n:,}"
    for status, n in jobs.items():
        if status != "SUCCEEDED":
            assert by_job[status][1] == f"{n:,}"
    assert by_status["COMPLETED"][1] == f"≈{estimate.rounded(messages['COMPLETED']):,}"
    assert by_job["SUCCEEDED"][1] == f"≈{estimate.rounded(jobs['SUCCEEDED']):,}"
    shown = reply.summary.split("their jobs: ", 1)[1].split(")", 1)[0].split(", ")
    assert set(shown) == {f"{n:,} {s}" for s, n in their_jobs}, reply.summary
    assert "COMPLETED and SUCCEEDED rows are not counted" in texts(reply)


async def test_stale_statistics_are_not_trusted(app: App, db_url: str, large: None) -> None:
    """Statistics that put the table below what was counted exactly (rows added since
    the last ANALYZE, on pages it never saw) are not used: everything is counted, in one
    snapshot."""
    only_postgres(db_url)
    await sql(app, "DELETE FROM dev_r_worker_queue WHERE status <> 'done'")
    await sql(
        app,
        "DELETE FROM dev_r_worker_queue WHERE id NOT IN "
        "(SELECT id FROM dev_r_worker_queue ORDER BY id LIMIT 3)",
    )
    await indexed(app, "workers")
    await analyze(app, "dev_r_worker_queue")  # 3 live rows on the table's pages
    await sql(
        app,
        "INSERT INTO dev_r_worker_queue (issue_number, job_type, status, queued_at) "
        "SELECT 900000 + g, 'dev-issue', 'failed', now() FROM generate_series(1, 3000) g",
    )
    reply = await triage(app, "/queue triage --queue workers")
    by_status = table(reply, "By status")
    assert by_status["done"][1] == "3" and by_status["failed"][1] == "3,000"
    assert "≈" not in reply.summary
    (by_type,) = [b for b in reply.blocks if isinstance(b, Table) and b.title == "By job type"]
    assert "succeeded" in by_type.columns  # the done rows are broken down by type again


async def test_without_a_status_index_or_succeeded_rows_everything_is_counted(
    app: App, db_url: str, large: None
) -> None:
    """Without an index leading with the status there is no cheap range per status (the
    walk would scan the table once per status): everything is counted. And a table with
    no row in the succeeded status has nothing to estimate."""
    only_postgres(db_url)
    await analyze(app, "dev_r_worker_queue")
    reply = await triage(app, "/queue triage --queue workers")
    assert "≈" not in reply.summary  # the shipped tables have no index on status
    await indexed(app, "workers")
    await sql(app, "UPDATE dev_r_worker_queue SET status = 'cancelled' WHERE status = 'done'")
    await analyze(app, "dev_r_worker_queue")
    reply = await triage(app, "/queue triage --queue workers")
    assert "≈" not in reply.summary and "done" not in table(reply, "By status")


async def test_sqlite_and_small_tables_are_counted_exactly(app: App, db_url: str) -> None:
    if db_url.startswith("postgresql"):
        await indexed(app, "workers")
        await analyze(app, "dev_r_worker_queue")  # statistics, but far below the threshold
    counts = await counts_of(app, "SELECT status, count(*) FROM dev_r_worker_queue GROUP BY 1")
    reply = await triage(app, "/queue triage --queue workers")
    assert numbers(table(reply, "By status")) == counts
    assert "≈" not in reply.summary
