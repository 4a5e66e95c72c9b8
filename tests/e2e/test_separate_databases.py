"""queuebot's tables in one database and the queue in another: the setup reads, refuses
every change saying why and how to fix it, and `config check` fails naming the fix."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from bot.demo import DEMO_CONFIG
from services.db import create_engine
from services.estate.demo import build_demo_estate
from tests.e2e.test_console import queuebot, replies


def test_separate_databases_read_refuse_changes_and_fail_the_check(tmp_path: Path) -> None:
    queue_db, state_db = tmp_path / "jobs.db", tmp_path / "queuebot.db"

    async def build() -> None:
        engine = create_engine(f"sqlite:///{queue_db}")
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=datetime.now(UTC))
        await engine.dispose()

    asyncio.run(build())
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config))
    env = {
        "QUEUEBOT_CONFIG": str(config),
        "QUEUEBOT_DATABASE_URL": f"sqlite:///{state_db}",
        "QUEUEBOT_QUEUE_DATABASE_URL": f"sqlite:///{queue_db}",
    }
    assert queuebot("db", "upgrade", cwd=tmp_path, env=env).returncode == 0

    check = queuebot("config", "check", cwd=tmp_path, env=env)
    assert check.returncode == 1
    assert "are in different databases" in check.stderr
    assert "Point QUEUEBOT_DATABASE_URL at the queue's database" in check.stderr

    run = queuebot(
        "console",
        "--as",
        "alice",
        stdin='/queue triage --queue workers\n/queue requeue 1 --queue workers --reason "x y z"\n',
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    out = replies(run.stdout)
    assert "Triage: queue workers" in out["/queue triage --queue workers"]
    refused = out['/queue requeue 1 --queue workers --reason "x y z"']
    assert (
        "this queuebot is read-only" in refused and "unset QUEUEBOT_QUEUE_DATABASE_URL" in refused
    )
