"""A transaction whose connection the database drops mid-way ends as DatabaseUnavailable
and nothing more: no connection is checked out behind it and SQLAlchemy's pool logs no
traceback (the connection's cleanup once read ``info`` from the invalidated connection,
which checked a new one out outside the event loop; a serve's log then held a traceback
whenever an outage cut a transaction of its worker)."""

from __future__ import annotations

import logging

import psycopg
import pytest
import sqlalchemy as sa

from services.db import create_engine, transaction
from services.errors import DatabaseUnavailable
from tests.conftest import _pg_conninfo

pytestmark = pytest.mark.postgres


async def test_a_connection_dropped_mid_transaction_leaves_no_traceback_and_no_checkout(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_engine(pg_url)
    caplog.set_level(logging.WARNING)
    try:
        async with engine.connect() as one, engine.connect() as two:  # two in the pool
            await one.execute(sa.text("SELECT 1"))
            await two.execute(sa.text("SELECT 1"))
        with pytest.raises(DatabaseUnavailable):
            async with transaction(engine, subject="the test") as conn:
                pid = (await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
                with psycopg.connect(_pg_conninfo(pg_url), autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                await conn.execute(sa.text("SELECT 1"))
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        pooled = [r for r in caplog.records if r.name.startswith("sqlalchemy")]
        assert pooled == [], [r.getMessage() for r in pooled]
        async with transaction(engine, subject="the test") as conn:  # and it goes on
            assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()
