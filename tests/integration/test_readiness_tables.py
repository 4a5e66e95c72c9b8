"""/readyz sees a queue table renamed while serving at the next probe, not only when its
fuller check comes round again (issue 26)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from bot.bootstrap import build_app
from bot.readiness import Readiness
from services.config import load_config
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from tests.conftest import holds_demo
from tests.integration.support import START

pytestmark = pytest.mark.demo_db


async def test_a_table_renamed_while_serving_is_seen_at_the_next_probe(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        if not holds_demo(db_url):
            async with engine.begin() as conn:
                await build_demo_estate(conn, now=START)
        app = await build_app(load_config(environ={"QUEUEBOT_DATABASE_URL": db_url}))
        readiness = Readiness(app, slack=None, clock=lambda: 0.0)  # the interval never passes
        try:
            ready, body = await readiness.check()
            assert ready, body
            async with engine.begin() as conn:
                await conn.execute(sa.text("ALTER TABLE dev_r_worker_queue RENAME TO old_queue"))
            ready, body = await readiness.check()
            assert not ready
            assert body["queues"]["workers"].startswith(
                "queue 'workers' (worker_queue): table 'dev_r_worker_queue' does not exist in "
                "the queue database"
            ), body
            assert body["queues"]["clips"] == "ok"
            async with engine.begin() as conn:
                await conn.execute(sa.text("ALTER TABLE old_queue RENAME TO dev_r_worker_queue"))
            ready, body = await readiness.check()
            assert ready, body
        finally:
            await app.close()
    finally:
        await engine.dispose()
