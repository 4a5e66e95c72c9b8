"""The audit key, anchors and `queuebot db grant` without a database: the key is checked
and never shown, anchors are N:MAC, the grants quote the role and refuse bad names."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from bot import cli
from services.audit import Anchor, AuditTrail
from services.config import load_config
from services.errors import ConfigError, UsageError
from services.grants import statements

KEY = "queuebot-test-audit-key-0123456789abcdef"


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("short-but-secret", "QUEUEBOT_AUDIT_KEY: must be at least 32 characters"),
        (KEY + "\n", "QUEUEBOT_AUDIT_KEY: must not begin or end with white space"),
    ],
)
def test_a_weak_key_is_refused_without_showing_it(key: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(environ={"QUEUEBOT_AUDIT_KEY": key})
    assert refused.value.message.startswith(f"environment: {said}")
    assert key.strip() not in refused.value.message


def test_the_key_is_a_secret_everywhere() -> None:
    config = load_config(environ={"QUEUEBOT_AUDIT_KEY": KEY})
    assert config.env.audit_key is not None
    assert KEY not in repr(config.env) + str(config.env.audit_key)
    trail = AuditTrail(key=SecretStr(KEY))
    assert repr(trail) == "AuditTrail(keyed=True)" and KEY not in repr(vars(trail))
    assert load_config(environ={}).env.audit_key is None


def test_anchors_are_an_event_and_its_seal() -> None:
    mac = "ab" * 32
    assert Anchor.parse(f" 12:{mac}\n") == Anchor(12, mac)
    assert str(Anchor(12, mac)) == f"12:{mac}"
    for bad in ("12", f"0:{mac}", f"-1:{mac}", f"12:{mac[:-1]}", f"12:{mac.upper()}", "x:y"):
        with pytest.raises(UsageError, match="is not N:MAC"):
            Anchor.parse(bad)


def test_grant_statements_quote_the_role_and_give_the_trail_no_rewrite() -> None:
    lines = statements("qb_runtime")
    assert lines[0].startswith('REVOKE ALL ON TABLE "qb_audit_events", "qb_audit_head"')
    assert 'GRANT SELECT, INSERT ON TABLE "qb_audit_events" TO "qb_runtime";' in lines
    assert (
        'GRANT SELECT, INSERT, UPDATE (last_id, last_hash) ON TABLE "qb_audit_head" '
        'TO "qb_runtime";'
    ) in lines
    grants = [line for line in lines if line.startswith("GRANT")]
    assert all('"qb_runtime";' in line for line in grants)
    assert not any("DELETE" in line or "TRUNCATE" in line for line in grants if "qb_audit" in line)


async def queuebot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QUEUEBOT_CONFIG", raising=False)
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", f"sqlite:///{tmp_path}/q.db")
    code = await cli.run(cli.parse(list(argv)))
    return code, "", ""


async def test_db_grant_prints_or_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await queuebot(monkeypatch, tmp_path, "db", "grant", "qb_runtime"))[0] == 0
    printed = capsys.readouterr().out
    assert printed.startswith('-- queuebot: the runtime role "qb_runtime" (serve, console)')
    assert 'GRANT SELECT, INSERT ON TABLE "qb_audit_events" TO "qb_runtime";' in printed
    assert "-- Your queue tables are yours to grant" in printed
    for role, said in (
        ('x"; DROP TABLE qb_audit_events; --', "expected a SQL identifier"),
        ("public.qb_runtime", "expected a role name"),
    ):
        assert (await queuebot(monkeypatch, tmp_path, "db", "grant", role))[0] == 4
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err
    assert (await queuebot(monkeypatch, tmp_path, "db", "grant", "qb_runtime", "--apply"))[0] == 4
    err = capsys.readouterr().err
    assert err.startswith("queuebot: db grant --apply needs PostgreSQL") and err.count("\n") == 1
    assert not (tmp_path / "q.db").exists()  # refused before touching anything
