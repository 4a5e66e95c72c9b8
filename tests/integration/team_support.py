"""A team's own queue tables in a test database, with queuebot's services over them: the
``Team`` the tests over a team's tables share, and the team whose worker table ``jobs``
keeps its states and times in columns of its own names (``report_team``, the
``team`` fixture of tests/integration/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import Services
from services.config import QueueConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.estate import Estate
from services.estate.model import DeadFilter, Triage
from services.estate.ops import Selector
from services.estate.profile import QueueProfile
from services.reads import samples
from tests.helpers.people import ALICE, BOB
from tests.helpers.replies import read_reply
from tests.integration.support import START, Clock, RecordingNotifier, build_services
from tests.kinds import ChangeKind


@dataclass
class Team:
    engine: AsyncEngine
    estate: Estate
    profile: QueueProfile
    clock: Clock
    services: Services

    async def triage(self, **kw: Any) -> Triage:
        async with self.estate.connect() as conn:
            return await self.profile.triage(conn, now=self.clock.now, since=None, **kw)

    async def dead_ids(self, **filters: Any) -> list[str]:
        async with self.estate.connect() as conn:
            found = await self.profile.dead(conn, filters=DeadFilter(limit=100, **filters))
        assert found.total == len(found.rows)
        return sorted(r.id for r in found.rows)

    async def describe(self) -> list[str]:
        async with self.estate.connect() as conn:
            return await self.profile.describe(conn)

    async def change(self, kind: ChangeKind, ids: list[str]) -> list[str]:
        """Request a change of these jobs as alice, approved by bob; the jobs changed."""
        view = await self.services.changes.request(
            kind=kind,
            queue="q",
            selector=Selector(ids=tuple(ids)),
            reason="fix deployed",
            actor=ALICE,
        )
        decision = await self.services.changes.approve(number=view.number, actor=BOB)
        assert decision.executed and decision.view.result is not None
        return sorted(decision.view.result.changed)

    async def reply(self, command: Any) -> str:
        """What a read command's reply says, rendered as the console prints it."""
        return await read_reply(self.estate, command)


async def open_team(db_url: str, config: QueueConfig, ddl: list[str] | None = None) -> Team:
    engine = create_engine(db_url)
    await upgrade(engine)  # queuebot's own tables beside the team's
    async with engine.begin() as conn:
        for statement in ddl or []:
            await conn.exec_driver_sql(statement)
    clock = Clock()
    estate = Estate(engine=engine, queues={"q": config}, clock=clock)
    services = build_services(engine, estate, clock, RecordingNotifier())
    return Team(engine, estate, estate.profile("q"), clock, services)


async def add_worker_rows(team: Team, rows: list[dict[str, Any]]) -> list[str]:
    async with team.engine.begin() as conn:
        q = (await team.profile.tables(conn))["queue"]
        ids = []
        for row in rows:
            values = {q.c(k).name: v for k, v in row.items()}
            done = await conn.execute(q.table.insert().values(values).returning(q.c("id")))
            ids.append(str(done.scalar_one()))
        return ids


SMTP = "TimeoutError: smtp relay mail-3.internal:587 did not answer within 30 s"


async def dead_letters(team: Team, count: int) -> list[str]:
    """``count`` jobs dead of SMTP two hours ago, and the dead-letter count written down
    15 minutes ago as flat: their ids."""
    at = START - timedelta(hours=2)
    rows = [
        {
            "status": "dead",
            "error_message": SMTP,
            "queued_at": at + timedelta(seconds=i),
            "claimed_at": at,
            "retry_count": 5,
            "job_type": "email",
        }
        for i in range(count)
    ]
    ids = await add_worker_rows(team, rows)
    async with team.engine.begin() as conn:  # a flat dead-letter count 15 minutes ago
        await samples.record(conn, profile=team.profile, now=START - timedelta(minutes=15))
    return ids


# The team's worker table of the report tests: jobs(id, state, last_error, enqueued_at,
# locked_at, attempts, kind), its dead ones in the state ``dead``.
REPORT_DDL = {
    "postgresql": "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, "
    "last_error TEXT, enqueued_at TIMESTAMPTZ NOT NULL, locked_at TIMESTAMPTZ, "
    "attempts INTEGER NOT NULL DEFAULT 0, kind TEXT)",
    "sqlite": "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL, "
    "last_error TEXT, enqueued_at DATETIME NOT NULL, locked_at DATETIME, "
    "attempts INTEGER NOT NULL DEFAULT 0, kind TEXT)",
}
REPORT_COLUMNS = {
    "queue.status": "state",
    "queue.error_message": "last_error",
    "queue.queued_at": "enqueued_at",
    "queue.claimed_at": "locked_at",
    "queue.retry_count": "attempts",
    "queue.job_type": "kind",
}


async def report_team(db_url: str) -> Team:
    """The team whose worker table is ``jobs`` (REPORT_DDL), bound by REPORT_COLUMNS."""
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    config = QueueConfig(
        profile="worker_queue", table="jobs", columns=REPORT_COLUMNS, statuses={"dead": ["dead"]}
    )
    return await open_team(db_url, config, [REPORT_DDL[dialect]])
