"""Secrets read from the files their NAME_FILE variables name (services/config/secret_files.py),
through load_config as every command reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.config import load_config
from services.errors import ConfigError

TOKEN = "xoxb-from-a-file-0123"


def _file(tmp_path: Path, content: bytes, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n", b"\n\n"])
def test_the_files_trailing_newline_is_not_part_of_the_value(tmp_path: Path, ending: bytes) -> None:
    env = load_config(
        environ={"SLACK_BOT_TOKEN_FILE": _file(tmp_path, TOKEN.encode() + ending)}
    ).env
    assert env.slack_bot_token is not None
    assert env.slack_bot_token.get_secret_value() == TOKEN


def test_every_secret_variable_has_its_file_form(tmp_path: Path) -> None:
    values = {
        "QUEUEBOT_DATABASE_URL": "sqlite:///./from-file.db",
        "QUEUEBOT_QUEUE_DATABASE_URL": "sqlite:///./queue-from-file.db",
        "QUEUEBOT_AUDIT_KEY": "k" * 32,
        "QUEUEBOT_ALERT_TOKEN": "t" * 16,
        "QUEUEBOT_HOUSEKEEP_WEBHOOK_URL": "https://hooks.example.com/x",
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s" * 32,
        "SLACK_APP_TOKEN": "xapp-1",
        "DISCORD_BOT_TOKEN": "d" * 40,
    }
    environ = {
        f"{name}_FILE": _file(tmp_path, f"{value}\n".encode(), name)
        for name, value in values.items()
    }
    env = load_config(environ=environ).env
    read = {
        str(info.validation_alias): getattr(env, field)
        for field, info in type(env).model_fields.items()
        if str(info.validation_alias) in values
    }
    assert set(read) == set(values)
    for name, secret in read.items():
        assert secret.get_secret_value() == values[name], name


def test_a_blank_chat_variable_beside_its_file_counts_as_not_set(tmp_path: Path) -> None:
    """A template's `SLACK_BOT_TOKEN=` left in place is no second value."""
    environ = {"SLACK_BOT_TOKEN": "", "SLACK_BOT_TOKEN_FILE": _file(tmp_path, b"xoxb-2\n")}
    env = load_config(environ=environ).env
    assert env.slack_bot_token is not None and env.slack_bot_token.get_secret_value() == "xoxb-2"
    assert "SLACK_BOT_TOKEN" not in env.empty


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfe not text", "the file is not UTF-8 text"),
        (b"a\x00b", "the file holds a NUL character; write the secret alone"),
        (b"x" * (64 * 1024 + 1), "the file is over 64 KiB; is it the file holding the secret?"),
    ],
    ids=["not utf-8", "nul", "too big"],
)
def test_a_file_that_is_no_secret_is_refused_naming_variable_and_path(
    tmp_path: Path, content: bytes, said: str
) -> None:
    path = _file(tmp_path, content)
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"DISCORD_BOT_TOKEN_FILE": path})
    assert caught.value.message == f"environment: DISCORD_BOT_TOKEN_FILE = {path!r}: {said}"


def test_a_directory_or_an_empty_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file: Is a directory"):
        load_config(environ={"QUEUEBOT_ALERT_TOKEN_FILE": str(tmp_path)})
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"QUEUEBOT_ALERT_TOKEN_FILE": ""})
    assert caught.value.message == (
        "environment: QUEUEBOT_ALERT_TOKEN_FILE is set but empty; give the path of the file "
        "holding QUEUEBOT_ALERT_TOKEN, or unset QUEUEBOT_ALERT_TOKEN_FILE"
    )


def test_a_file_variable_of_no_secret_is_not_read(tmp_path: Path) -> None:
    """Only secrets have a file form: QUEUEBOT_LOG_LEVEL_FILE is nothing queuebot reads."""
    env = load_config(environ={"QUEUEBOT_LOG_LEVEL_FILE": str(tmp_path / "none")}).env
    assert env.config_path is None
