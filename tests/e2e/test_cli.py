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


def test_config_is_accepted_after_the_subcommand_too(demo: Demo) -> None:
    env = {"QUEUEBOT_DATABASE_URL": demo.url}
    for args in (
        ("config", "check", "--config", str(demo.config)),
        ("config", "--config", str(demo.config), "check"),
        ("--config", "elsewhere.toml", "config", "check", "--config", str(demo.config)),
    ):
        result = queuebot(*args, cwd=demo.dir, env=env)
        assert result.returncode == 0, (args, result.stderr)
        assert f"config: {demo.config}\n" in result.stdout
    console = queuebot(
        "console",
        "--config",
        str(demo.config),
        "--as",
        "alice",
        stdin="/queue help\n",
        cwd=demo.dir,
        env=env,
    )
    assert console.returncode == 0, console.stderr
    assert "/queue triage" in console.stdout


def test_version_comes_from_the_installed_package() -> None:
    from importlib.metadata import version

    result = queuebot("--version", cwd=Path.cwd())
    assert (result.returncode, result.stdout) == (0, f"queuebot {version('queuebot')}\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("frobnicate",), "queuebot: argument COMMAND: invalid choice: 'frobnicate'"),
        (("db",), "queuebot db: the following arguments are required: SUBCOMMAND"),
        (("serve", "--port", "http"), "queuebot serve: argument --port: invalid int value"),
        (("console", "--config"), "queuebot console: argument --config: expected one argument"),
    ],
)
def test_a_usage_error_is_one_line_naming_help(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    result = queuebot(*args, cwd=tmp_path)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith(said) and line.endswith("--help`)"), line


def test_a_bad_log_level_variable_is_one_line(tmp_path: Path) -> None:
    result = queuebot("config", "check", cwd=tmp_path, env={"QUEUEBOT_LOG_LEVEL": "loud"})
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "queuebot: environment: QUEUEBOT_LOG_LEVEL = 'loud': expected one of DEBUG, INFO, "
        "WARNING, ERROR"
    )
    assert list(tmp_path.iterdir()) == []
    quiet = queuebot(
        "estate", "indexes", "--print", cwd=tmp_path, env={"QUEUEBOT_LOG_LEVEL": "error"}
    )
    assert quiet.returncode == 0, quiet.stderr
