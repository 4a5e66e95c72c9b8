"""A migrated queuebot database holding the demo estate, with a controllable clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.config import default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import DemoEstate
from services.estate.estate import Estate
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.integration.support import Clock, RecordingNotifier, Shop, build_services


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
