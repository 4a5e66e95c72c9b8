"""The columns that hold a change's row images are stored with lz4 on PostgreSQL, and a
change request's images read back whole after the switch."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from services.audit import Actor, AuditTrail
from services.db import create_engine
from services.db.migrate import upgrade

pytestmark = pytest.mark.postgres

LARGE = (
    ("qb_audit_events", "details"),
    ("qb_change_requests", "targets"),
    ("qb_change_requests", "ineligible"),
    ("qb_change_requests", "result"),
    ("qb_plan_items", "original"),
)


async def test_image_columns_use_lz4_and_read_back_whole(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            lz4 = (
                await conn.execute(
                    sa.text(
                        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                        "WHERE name = 'default_toast_compression'"
                    )
                )
            ).scalar_one()
            if not lz4:
                pytest.skip("this PostgreSQL server is built without lz4")
            found = {
                (table, column): method
                for table, column, method in (
                    await conn.execute(
                        sa.text(
                            "SELECT c.relname, a.attname, a.attcompression FROM pg_attribute a "
                            "JOIN pg_class c ON c.oid = a.attrelid "
                            "WHERE c.relname = ANY(:tables) AND a.attnum > 0"
                        ),
                        {"tables": sorted({t for t, _ in LARGE})},
                    )
                ).all()
            }
            assert {key: found[key] for key in LARGE} == dict.fromkeys(LARGE, "l")
            # an event big enough to be compressed reads back as it went in, and verifies
            rows = [{"row": i, "error": "ffmpeg exited with code 137"} for i in range(5000)]
            await AuditTrail().append(
                conn,
                action="change.requested",
                actor=Actor.system("test"),
                at=datetime.now(UTC),
                subject="CR-1",
                details={"snapshot": rows},
            )
            details, method = (
                await conn.execute(
                    sa.text(
                        "SELECT details, pg_column_compression(details) FROM qb_audit_events "
                        "WHERE subject = 'CR-1'"
                    )
                )
            ).one()
            assert (json.loads(details)["snapshot"], method) == (rows, "lz4")
            assert (await AuditTrail().verify(conn)).ok
    finally:
        await engine.dispose()
