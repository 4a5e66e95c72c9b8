"""``queuebot db prune`` as cron or a systemd timer runs it, a real process on SQLite and
PostgreSQL: a dry run lists what would go and changes nothing, the run removes exactly
that and ``audit verify`` still passes, a bad ``--older-than`` is one clear line and exit
2, and a keyed trail without its key is refused before anything is deleted."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.exits import EXIT_AUDIT_KEY, EXIT_USAGE
from services.audit import Actor, AuditTrail
from services.db import create_engine
from tests.e2e.test_console import queuebot
from tests.integration.retention_support import GONE, KEPT, keys, seed

KEY = "a-key-of-thirty-two-characters-or-more"


def rows(stdout: str) -> dict[str, int]:
    """The per-table lines of the output: table -> rows."""
    found = re.findall(r"^\s+(qb_\w+)\s+([\d,]+)\s", stdout, flags=re.MULTILINE)
    return {table: int(n.replace(",", "")) for table, n in found}


async def seeded(url: str) -> dict[str, set[object]]:
    engine = create_engine(url)
    try:
        await seed(engine, datetime.now(UTC))
        return await keys(engine)
    finally:
        await engine.dispose()


async def current(url: str) -> dict[str, set[object]]:
    engine = create_engine(url)
    try:
        return await keys(engine)
    finally:
        await engine.dispose()


async def test_dry_run_then_prune_then_verify(db_url: str, tmp_path: Path) -> None:
    before = await seeded(db_url)
    env = {"QUEUEBOT_DATABASE_URL": db_url}

    dry = queuebot("db", "prune", "--older-than", "30d", "--dry-run", cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("dry run: prune older than 30d (cutoff ")
    assert rows(dry.stdout) == GONE
    assert "nothing was deleted and no audit event written (dry run)" in dry.stdout
    assert await current(db_url) == before

    run = queuebot("db", "prune", "--older-than", "30d", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert rows(run.stdout) == GONE
    assert re.search(r"^4 audit event\(s\) db\.pruned \(run [0-9a-f]{8}\)", run.stdout, re.M)
    after = await current(db_url)
    for table, kept in KEPT.items():
        assert kept <= after[table], table
        assert len(before[table]) - len(after[table]) == GONE[table], table

    verify = queuebot("audit", "verify", cwd=tmp_path, env=env)
    assert verify.returncode == 0, verify.stderr
    assert "audit trail intact: 4 event(s) verified" in verify.stdout  # one per table

    again = queuebot("db", "prune", "--older-than", "4w", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert set(rows(again.stdout).values()) == {0}
    assert "0 audit event(s)" in again.stdout


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("30", "--older-than '30': the number needs a unit, e.g. --older-than 30d"),
        ("-1d", "--older-than '-1d': the age must be positive"),
        ("0d", "--older-than '0d': the age must be positive"),
        ("12h", "--older-than '12h': at least 24h (1d): delivery keys must outlive"),
    ],
)
def test_a_bad_age_is_one_line_and_exit_2(tmp_path: Path, given: str, said: str) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'q.db'}"
    done = queuebot(
        "db", "prune", "--older-than", given, cwd=tmp_path, env={"QUEUEBOT_DATABASE_URL": url}
    )
    assert done.returncode == EXIT_USAGE
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"queuebot: {said}"), done.stderr


async def test_a_keyed_trail_without_its_key_is_refused_before_deleting(
    db_url: str, tmp_path: Path
) -> None:
    engine = create_engine(db_url)
    try:
        async with engine.begin() as conn:
            await AuditTrail(key=SecretStr(KEY)).append(
                conn, action="test.keyed", actor=Actor.system("test"), at=datetime.now(UTC)
            )
        await seed(engine, datetime.now(UTC))
        before = await keys(engine)
    finally:
        await engine.dispose()
    env = {"QUEUEBOT_DATABASE_URL": db_url}

    refused = queuebot("db", "prune", "--older-than", "30d", cwd=tmp_path, env=env)
    assert refused.returncode == EXIT_AUDIT_KEY, refused.stderr
    assert "QUEUEBOT_AUDIT_KEY" in refused.stderr
    assert await current(db_url) == before

    keyed = queuebot(
        "db", "prune", "--older-than", "30d", cwd=tmp_path, env={**env, "QUEUEBOT_AUDIT_KEY": KEY}
    )
    assert keyed.returncode == 0, keyed.stderr
    assert rows(keyed.stdout) == GONE
    verify = queuebot("audit", "verify", cwd=tmp_path, env={**env, "QUEUEBOT_AUDIT_KEY": KEY})
    assert verify.returncode == 0, verify.stderr
    assert "(5 keyed, 0 unkeyed)" in verify.stdout
