"""Every command that writes audit events refuses a key that does not match the trail,
before it changes anything: `housekeep`, `console` and `serve` with another key than the trail was
written with exit 2, without a key for a keyed trail exit 3, each with one line; the queue
and the trail are as they were and `audit verify` still says intact. A process that
started while the trail was unkeyed cannot extend it once another process keyed it with
another key."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from bot import cli
from bot.demo import DEMO_CONFIG
from services.audit import AuditKeyMismatch, AuditTrail
from services.db.tables import AuditEvent
from tests.helpers.people import ALICE
from tests.integration.support import START, Shop

KEY = "queuebot-test-audit-key-0123456789abcdef"
OTHER_KEY = "not-the-key-but-just-as-long-0123456789abcdef"
EVENTS = cast(sa.Table, AuditEvent.__table__)


def trail(key: str | None) -> AuditTrail:
    return AuditTrail(key=SecretStr(key) if key else None)


async def append(shop: Shop, audit: AuditTrail, subject: str) -> None:
    async with shop.engine.begin() as conn:
        await audit.append(conn, action="test.noted", actor=ALICE, at=START, subject=subject)


async def state(shop: Shop) -> tuple[list[Any], list[Any]]:
    """The worker queue's rows and the trail's events, as they are now."""
    async with shop.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT * FROM dev_r_worker_queue ORDER BY id"))).all()
        events = (await conn.execute(sa.select(EVENTS).order_by(EVENTS.c.id))).all()
    return list(rows), list(events)


@pytest.fixture
def queuebot(
    shop: Shop,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    """`queuebot ARGS...` in this process against the shop's database, with ``key`` as
    QUEUEBOT_AUDIT_KEY and ``stdin``: (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "queuebot.toml"  # the demo's queues and people
    config.write_text(DEMO_CONFIG.format(config=config))
    monkeypatch.setenv("QUEUEBOT_CONFIG", str(config))
    monkeypatch.delenv("QUEUEBOT_QUEUE_DATABASE_URL", raising=False)
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", db_url)
    monkeypatch.setenv("QUEUEBOT_ALERT_TOKEN", "audit-writers-alert-token")  # serve needs one

    async def run(*argv: str, key: str | None, stdin: str = "") -> tuple[int, str, str]:
        if key is None:
            monkeypatch.delenv("QUEUEBOT_AUDIT_KEY", raising=False)
        else:
            monkeypatch.setenv("QUEUEBOT_AUDIT_KEY", key)
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = await cli.run(cli.parse(list(argv)))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


async def test_every_writer_with_the_wrong_key_or_none_changes_nothing(
    shop: Shop, queuebot: Any
) -> None:
    job = shop.demo.worker_failed_id
    writers: dict[str, tuple[tuple[str, ...], str]] = {
        "housekeep": (("housekeep",), ""),
        "console": (
            ("console", "--as", "alice"),
            f'/queue requeue {job} --queue workers --reason "try again"\n',
        ),
        "serve": (("serve", "--port", "0"), ""),
    }
    await append(shop, trail(KEY), "keyed")  # the trail is keyed now
    before = await state(shop)
    for writer, (argv, stdin) in writers.items():
        code, out, err = await queuebot(*argv, key=OTHER_KEY, stdin=stdin)
        assert code == 2, (writer, out, err)
        assert err.count("\n") == 1 and err.startswith(
            "queuebot: QUEUEBOT_AUDIT_KEY does not match the newest audit event (1), the "
            "trail's head: it is another key than the trail was written with"
        ), (writer, err)
        assert "set QUEUEBOT_AUDIT_KEY to the key the trail was written with" in err
        assert OTHER_KEY not in out + err
        assert await state(shop) == before, writer

        code, out, err = await queuebot(*argv, key=None, stdin=stdin)
        assert code == 3, (writer, out, err)
        assert err == (
            "queuebot: the audit trail is keyed (event 1 is sealed with HMAC-SHA256) but "
            "QUEUEBOT_AUDIT_KEY is not set: appending to it needs the key it was written with\n"
        ), writer
        assert await state(shop) == before, writer

    code, out, err = await queuebot("audit", "verify", key=KEY)
    assert code == 0 and out.startswith("audit trail intact: 1 event(s) verified (1 keyed")

    for writer in ("housekeep", "console"):  # the right key works (serve would not stop)
        argv, stdin = writers[writer]
        code, out, err = await queuebot(*argv, key=KEY, stdin=stdin)
        assert code == 0, (writer, out, err)
    assert (await state(shop))[1] != before[1]
    code, out, err = await queuebot("audit", "verify", key=KEY)
    assert code == 0, err


async def test_a_trail_keyed_meanwhile_by_another_key_is_not_extended(shop: Shop) -> None:
    """Two processes start while the trail is unkeyed, with different keys: both pass
    their start check; once one has written a keyed event, the other's append refuses."""
    await append(shop, trail(None), "unkeyed")
    first, second = trail(KEY), trail(OTHER_KEY)
    async with shop.engine.connect() as conn:
        assert await first.key_problem(conn) is None
        assert await second.key_problem(conn) is None
    await append(shop, first, "keyed by the first")
    _, events = await state(shop)
    with pytest.raises(AuditKeyMismatch, match=r"newest audit event \(2\)"):
        await append(shop, second, "keyed by the second")
    assert (await state(shop))[1] == events
    async with shop.engine.connect() as conn:
        assert (await first.verify(conn)).ok
