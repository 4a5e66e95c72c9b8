"""The [reads] settings reach the running app: a result is kept for fresh_seconds, and a
change the app makes itself is shown by the next read, not hidden behind a kept result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.bootstrap import App
from commands.context import Invocation
from tests.integration.support import demo_app

# demo_app over a copy of the template holding the demo estate built at START.
pytestmark = pytest.mark.demo_db


@pytest.fixture
async def app(db_url: str, tmp_path: Path) -> AsyncIterator[App]:
    async with demo_app(db_url, tmp_path, extra_config="\n[reads]\nfresh_seconds = 300\n") as built:
        yield built


def as_(app: App, name: str) -> Invocation:
    return Invocation(person=app.directory.by_name(name), platform="console", account=name)


async def triage_summary(app: App) -> str:
    """e.g. "Queue workers: 214 jobs; 3 dead, 21 failed, 1 stuck, oldest pending 52m"."""
    reply = await app.router.handle_line("/queue triage --queue workers", as_(app, "alice"))
    return reply.message.summary


async def a_failed_row(app: App) -> int:
    async with app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")
        )
        return int(found.scalar_one())


async def test_reads_are_kept_for_fresh_seconds_and_dropped_after_a_change(app: App) -> None:
    before = await triage_summary(app)
    moved = await a_failed_row(app)
    async with app.state_engine.begin() as conn:  # someone else's worker moves a row
        await conn.execute(
            sa.text("UPDATE dev_r_worker_queue SET status = 'queued' WHERE id = :id"),
            {"id": moved},
        )
    assert await triage_summary(app) == before  # kept: [reads] fresh_seconds = 300

    request = await app.router.handle_line(
        f'/queue requeue {await a_failed_row(app)} --queue workers --reason "RAM freed"',
        as_(app, "alice"),
    )
    number = request.message.summary.split(":")[0]
    await app.router.handle_line(f"/queue approve {number}", as_(app, "bob"))
    after = await triage_summary(app)
    assert after != before  # the approval dropped what was kept: both changes show
