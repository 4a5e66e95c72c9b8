"""A trail written before keys existed keeps verifying after migration 0006, goes on
keyed once QUEUEBOT_AUDIT_KEY is set, and a start without a key says what that means."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from bot import cli
from bot.audit_key import UNKEYED
from bot.bootstrap import build_app
from services.audit import GENESIS, AuditTrail, event_hash
from services.config import load_config
from services.db import create_engine
from services.db.migrate import head_revision, upgrade
from services.db.tables import AuditEvent, AuditHead
from tests.helpers.people import BOB

KEY = "queuebot-test-audit-key-0123456789abcdef"
EVENTS = cast(sa.Table, AuditEvent.__table__)
HEAD = cast(sa.Table, AuditHead.__table__)


@pytest.mark.empty_db  # migrates from revision 0004 itself
async def test_a_trail_from_before_keys_keeps_verifying(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        assert await upgrade(engine, "0004") == "0004"
        async with engine.begin() as conn:  # what queuebot wrote at revision 0004
            prev, last = GENESIS, 0
            for n in range(3):
                row = {
                    "occurred_at": datetime(2026, 11, 30, 3, n, tzinfo=UTC),
                    "action": "change.requested",
                    "actor_person": "alice",
                    "actor_platform": "console",
                    "actor_account": "alice",
                    "subject": f"X-{n}",
                    "queue": "clips",
                    "incident": None,
                    "reason": "before keys",
                    "evidence": None,
                    "details": "{}",
                    "prev_hash": prev,
                }
                row["hash"] = event_hash(row)
                inserted = await conn.execute(EVENTS.insert().values(**row).returning(EVENTS.c.id))
                prev, last = row["hash"], inserted.scalar_one()
            await conn.execute(
                sa.text("INSERT INTO qb_audit_head (id, last_id, last_hash) VALUES (1, :i, :h)"),
                {"i": last, "h": prev},
            )
        assert await upgrade(engine) == head_revision()
        async with engine.connect() as conn:
            schemes = (await conn.execute(sa.select(EVENTS.c.scheme))).scalars().all()
            assert schemes == ["sha256"] * 3
            result = await AuditTrail().verify(conn)
            assert (result.ok, result.checked, result.keyed) == (True, 3, 0)
        trail = AuditTrail(key=SecretStr(KEY))
        async with engine.begin() as conn:
            await trail.append(
                conn,
                action="change.requested",
                actor=BOB,
                at=datetime(2026, 12, 1, tzinfo=UTC),
                subject="X-3",
            )
        async with engine.connect() as conn:
            result = await trail.verify(conn)
            assert (result.ok, result.checked, result.keyed) == (True, 4, 1)
    finally:
        await engine.dispose()


async def test_a_start_without_a_key_says_what_the_trail_is_worth(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"QUEUEBOT_DATABASE_URL": db_url}
    with caplog.at_level(logging.WARNING, logger="queuebot"):
        app = await build_app(load_config(environ=environ))
        await app.close()
    assert [r.getMessage() for r in caplog.records] == [UNKEYED]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="queuebot"):
        app = await build_app(load_config(environ={**environ, "QUEUEBOT_AUDIT_KEY": KEY}))
        await app.close()
    assert caplog.records == []

    monkeypatch.delenv("QUEUEBOT_CONFIG", raising=False)
    monkeypatch.delenv("QUEUEBOT_AUDIT_KEY", raising=False)
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", db_url)
    monkeypatch.setenv("QUEUEBOT_QUEUE_DATABASE_URL", db_url)
    capsys.readouterr()
    await cli.run(cli.parse(["config", "check"]))
    out = capsys.readouterr().out
    assert (
        "QUEUEBOT_AUDIT_KEY: not set: the audit trail is tamper-evident only against people "
        "without access to queuebot's database (see docs/audit.md)"
    ) in out
