"""``[database]``: every PostgreSQL connection's timeouts and keepalives, what they become
in libpq's parameters, and the settings a file may not hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from services.config import DatabaseConfig, FileConfig, load_config
from services.db.bounds import bound_now, bounded, libpq_params, server_settings, unbounded
from services.errors import ConfigError


def config_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "queuebot.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    return str(info.value)


def test_the_defaults_answer_within_ten_seconds_or_so() -> None:
    d = FileConfig().database
    assert (d.connect_timeout_seconds, d.statement_timeout_seconds) == (5, 10)
    assert (d.lock_timeout_seconds, d.idle_in_transaction_timeout_seconds) == (8, 20)
    # a dead path is found by the keepalives within idle + interval * count seconds
    assert d.keepalives_idle_seconds + d.keepalives_interval_seconds * d.keepalives_count == 10
    assert d.tcp_user_timeout_seconds == 10
    assert d.answer_within == 12  # PostgreSQL's own "canceling statement" comes first


def test_a_file_sets_them(tmp_path: Path) -> None:
    path = tmp_path / "queuebot.toml"
    path.write_text(
        "[database]\nstatement_timeout_seconds = 60\nconnect_timeout_seconds = 3\n",
        encoding="utf-8",
    )
    settings = load_config(path, environ={}).file.database
    assert settings.statement_timeout_seconds == 60 and settings.connect_timeout_seconds == 3
    assert settings.answer_within == 62


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("connect_timeout_seconds = 1", "greater than or equal to 2"),
        ("statement_timeout_seconds = 0", "greater than or equal to 1"),
        ("tcp_user_timeout_seconds = 0", "greater than or equal to 1"),
        ("keepalives_count = 50", "less than or equal to 20"),
        ("statement_timout_seconds = 5", "unknown key; did you mean statement_timeout_seconds?"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(tmp_path: Path, line: str, expected: str) -> None:
    message = config_error(tmp_path, f"[database]\n{line}\n")
    assert f"database.{line.split(' =', maxsplit=1)[0]}" in message
    assert expected in message


def test_a_lock_timeout_longer_than_the_statement_timeout_is_refused(tmp_path: Path) -> None:
    message = config_error(
        tmp_path, "[database]\nstatement_timeout_seconds = 5\nlock_timeout_seconds = 30\n"
    )
    assert "lock_timeout_seconds (30) must not be longer than statement_timeout_seconds (5)" in (
        message
    )


def test_libpq_gets_the_timeouts_and_postgresql_its_own() -> None:
    url = make_url("postgresql+psycopg://qb:pw@db.example:6432/qb")
    params = libpq_params(url, DatabaseConfig())
    assert params["host"] == "db.example" and params["port"] == 6432
    assert params["user"] == "qb" and params["password"] == "pw" and params["dbname"] == "qb"
    assert params["connect_timeout"] == 5 and params["keepalives"] == 1
    assert (params["keepalives_idle"], params["keepalives_interval"]) == (4, 2)
    assert params["keepalives_count"] == 3 and params["tcp_user_timeout"] == 10_000
    assert "options" not in params  # PgBouncer refuses what it does not know there
    statement, values = server_settings(url, DatabaseConfig())
    assert statement == "SELECT " + ", ".join(["set_config(%s, %s, false)"] * 7)
    assert dict(zip(values[::2], values[1::2], strict=True)) == {
        "statement_timeout": "10000",
        "lock_timeout": "8000",
        "idle_in_transaction_session_timeout": "20000",
        "tcp_keepalives_idle": "4",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": "10000",
    }


def test_what_the_url_says_wins() -> None:
    url = make_url(
        "postgresql://qb@db/qb?connect_timeout=30"
        "&options=-c%20statement_timeout%3D60s%20--lock-timeout%3D9s"
    )
    assert libpq_params(url, DatabaseConfig())["connect_timeout"] == "30"
    _, values = server_settings(url, DatabaseConfig())
    assert "statement_timeout" not in values and "lock_timeout" not in values
    assert "idle_in_transaction_session_timeout" in values


def test_a_block_bound_gives_way_to_an_inner_one() -> None:
    assert bound_now(12.0) == 12.0
    with bounded(1.5):
        assert bound_now(12.0) == 1.5
        with unbounded():
            assert bound_now(12.0) is None
        assert bound_now(12.0) == 1.5
    assert bound_now(12.0) == 12.0
