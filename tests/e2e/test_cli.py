"""The command line in an operator's first hour, as a real process: every failure is one
line on stderr with its documented exit code, and nothing is created by a command that
only reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.demo import DEMO_CONFIG
from tests.e2e.serving import demo_database
from tests.e2e.test_console import queuebot


@dataclass(frozen=True)
class Demo:
    """A migrated SQLite database holding the demo estate, and the demo configuration."""

    dir: Path
    url: str
    config: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {"QUEUEBOT_DATABASE_URL": self.url, "QUEUEBOT_CONFIG": str(self.config), **extra}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    workdir = tmp_path_factory.mktemp("cli")
    config = workdir / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config))
    with demo_database("sqlite", workdir) as url:
        yield Demo(workdir, url, config)


def one_line(stderr: str) -> str:
    """The one line a failure prints: no traceback, nothing before or after it."""
    assert "Traceback" not in stderr, stderr
    assert stderr.count("\n") == 1, stderr
    return stderr.strip()


def test_config_check_says_an_empty_slack_variable_is_empty(demo: Demo) -> None:
    result = queuebot(
        "config", "check", cwd=demo.dir, env=demo.env(SLACK_SIGNING_SECRET="", SLACK_APP_TOKEN=" ")
    )
    assert result.returncode == 0, result.stderr
    assert "SLACK_BOT_TOKEN: not set\n" in result.stdout
    assert "SLACK_SIGNING_SECRET: empty (counts as not set)\n" in result.stdout
    assert "SLACK_APP_TOKEN: empty (counts as not set)\n" in result.stdout
