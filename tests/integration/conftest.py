"""The integration tests' shared fixtures: a migrated engine, a migrated queuebot database
holding the demo estate with a controllable clock (``shop``), the audit trail checked
after a test, and a team's own worker table (``team``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.config import default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import DemoEstate
from services.estate.estate import Estate
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.integration.support import (
    Clock,
    RecordingNotifier,
    Shop,
    assert_trail_holds,
    build_services,
)
from tests.integration.team_support import Team, report_team


@pytest.fixture
async def shop(demo_db_url: str, demo_estate: DemoEstate) -> AsyncIterator[Shop]:
    # The database is a copy of a template holding the demo estate built at START.
    engine = create_engine(demo_db_url)
    await upgrade(engine)  # a no-op check: the template is at the newest revision
    demo = demo_estate
    clock = Clock()
    estate = Estate(engine=engine, queues=default_queues(), clock=clock)
    notifier = RecordingNotifier()
    services = build_services(engine, estate, clock, notifier)
    yield Shop(
        engine,
        estate,
        QueueReads(estate, gate=ReadGate(fresh_for=0.0)),
        services.changes,
        demo,
        services,
        clock,
        notifier,
    )
    await engine.dispose()


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine over ``db_url``, migrated."""
    engine = create_engine(db_url)
    await upgrade(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
async def trail_holds(shop: Shop) -> AsyncIterator[None]:
    """After the test, the shop's audit trail holds, cross-checked with the state tables
    (a module asks for it with ``pytest.mark.usefixtures("trail_holds")``)."""
    yield
    await assert_trail_holds(shop)


@pytest.fixture
async def team(db_url: str) -> AsyncIterator[Team]:
    """The team whose own worker table ``jobs`` names its columns its own way
    (team_support.report_team)."""
    built = await report_team(db_url)
    yield built
    await built.engine.dispose()
