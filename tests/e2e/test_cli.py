"""The command line in an operator's first hour, as a real process: every failure is one
line on stderr with its documented exit code, and nothing is created by a command that
only reads."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.demo import DEMO_CONFIG
from services.db.migrate import head_revision
from testkit.ports import free_port
from tests.e2e.serving import ALERT_TOKEN, demo_database
from tests.e2e.test_console import queuebot, replies


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


def test_config_check_says_an_empty_alert_token_is_empty(demo: Demo) -> None:
    """`QUEUEBOT_ALERT_TOKEN=` leaves alerts open to anyone who reaches the port: config
    check says so, never that the token is set (blanks count the same: unit tests)."""
    result = queuebot("config", "check", cwd=demo.dir, env=demo.env(QUEUEBOT_ALERT_TOKEN=""))
    assert result.returncode == 0, result.stderr
    assert (
        "alerts: POST /alerts/alertmanager, QUEUEBOT_ALERT_TOKEN is empty (counts as not set): "
        "anyone who reaches the port may post alerts\n"
    ) in result.stdout
    assert "QUEUEBOT_ALERT_TOKEN set" not in result.stdout


@pytest.mark.parametrize("args", [("config", "check"), ("serve", "--port", "0")], ids=" ".join)
def test_an_alert_token_too_short_to_be_a_secret_is_one_line_and_exit_2(
    demo: Demo, args: tuple[str, ...]
) -> None:
    result = queuebot(*args, cwd=demo.dir, env=demo.env(QUEUEBOT_ALERT_TOKEN="secret"))
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "queuebot: environment: QUEUEBOT_ALERT_TOKEN: must be at least 16 characters (a "
        "shorter one is no secret); make one with `openssl rand -hex 16`, or leave it unset"
    )
    assert "serving on" not in result.stderr


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


def closed_port_url() -> str:
    """A PostgreSQL URL where nothing listens."""
    return f"postgresql://queuebot@127.0.0.1:{free_port()}/queuebot"


@pytest.mark.parametrize(
    "args",
    [
        ("config", "check"),
        ("audit", "verify"),
        ("audit", "head"),
        ("db", "upgrade"),
        ("db", "grant", "qb_runtime", "--apply"),
        ("db", "prune", "--older-than", "30d"),
        ("db", "prune", "--older-than", "30d", "--dry-run"),
        ("console",),
        ("serve", "--port", "0"),
    ],
    ids=" ".join,
)
def test_an_unreachable_database_is_one_line_and_exit_5(tmp_path: Path, args: list[str]) -> None:
    # serve is given its alert token: without one it would stop before reaching the database
    env = {"QUEUEBOT_DATABASE_URL": closed_port_url(), "QUEUEBOT_ALERT_TOKEN": ALERT_TOKEN}
    result = queuebot(*args, cwd=tmp_path, env=env)
    assert result.returncode == 5, result.stderr
    line = one_line(result.stderr)
    assert "queuebot's database postgresql://queuebot@127.0.0.1:" in line  # as typed
    assert "Connection refused" in line
    assert line.endswith("check QUEUEBOT_DATABASE_URL and that the database is up"), line


@pytest.mark.parametrize(
    ("variable", "port", "args"),
    [
        ("QUEUEBOT_DATABASE_URL", "notaport", ("config", "check")),
        ("QUEUEBOT_QUEUE_DATABASE_URL", "notaport", ("serve", "--port", "0")),
    ],
    ids=["config check", "serve"],
)
def test_a_bad_port_in_a_database_url_is_one_line_and_exit_2(
    demo: Demo, variable: str, port: str, args: tuple[str, ...]
) -> None:
    env = demo.env(**{variable: f"postgresql://u:secret-pw@db.internal:{port}/jobs"})
    result = queuebot(*args, cwd=demo.dir, env=env)
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr) == (
        f"queuebot: the port {port!r} in {variable} is not a number from 1 to 65535; write it "
        "as postgresql://user@host:5432/db, or leave it out for PostgreSQL's 5432"
    )
    assert "secret-pw" not in result.stderr + result.stdout


def set_revision(db: Path, revision: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))


@pytest.mark.parametrize(
    "args",
    [
        ("db", "upgrade"),
        ("db", "prune", "--older-than", "30d"),
        ("console",),
        ("audit", "verify"),
        ("serve", "--port", "0"),
    ],
    ids=" ".join,
)
def test_tables_from_a_newer_queuebot_are_one_line_and_exit_6(
    tmp_path: Path, args: list[str]
) -> None:
    db = tmp_path / "state.db"
    url = f"sqlite:///{db}"
    assert (
        queuebot("db", "upgrade", cwd=tmp_path, env={"QUEUEBOT_DATABASE_URL": url}).returncode == 0
    )
    set_revision(db, "9999")
    env = {"QUEUEBOT_DATABASE_URL": url, "QUEUEBOT_ALERT_TOKEN": ALERT_TOKEN}
    result = queuebot(*args, cwd=tmp_path, env=env)
    assert result.returncode == 6
    assert one_line(result.stderr) == (
        f"queuebot: queuebot's database sqlite:///{db} is at revision 9999, which "
        f"this queuebot does not know (its newest is {head_revision()}): a newer queuebot "
        "migrated it; run that version"
    )


@pytest.mark.parametrize("args", [("audit", "verify"), ("audit", "head")], ids=" ".join)
def test_reading_the_trail_before_db_upgrade_is_one_line_and_exit_6(
    tmp_path: Path, args: list[str]
) -> None:
    db = tmp_path / "state.db"
    sqlite3.connect(db).close()  # a database, but queuebot's tables were never made
    env = {"QUEUEBOT_DATABASE_URL": f"sqlite:///{db}"}
    result = queuebot(*args, cwd=tmp_path, env=env)
    assert result.returncode == 6
    assert one_line(result.stderr) == (
        f"queuebot: queuebot's tables are not in sqlite:///{db} yet: run "
        "`queuebot db upgrade` first"
    )
    assert queuebot("db", "upgrade", cwd=tmp_path, env=env).returncode == 0
    set_revision(db, "0004")
    older = queuebot(*args, cwd=tmp_path, env=env)
    assert older.returncode == 6
    assert one_line(older.stderr).endswith(
        f"is at revision 0004, newest is {head_revision()}: run `queuebot db upgrade` first"
    )


def test_readme_documents_every_exit_code() -> None:
    from bot import cli

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    codes = {v for k, v in vars(cli).items() if k.startswith("EXIT_")}
    assert documented == codes | {0}
    assert f"| {cli.EXIT_UNAVAILABLE} |" in table and f"| {cli.EXIT_NOT_MIGRATED} |" in table


@pytest.mark.parametrize(
    "args",
    [("config", "check"), ("audit", "verify"), ("audit", "head"), ("estate", "indexes", "--print")],
    ids=" ".join,
)
def test_a_command_that_only_reads_creates_no_database(tmp_path: Path, args: list[str]) -> None:
    result = queuebot(*args, cwd=tmp_path)  # no variables: the default ./queuebot.db
    assert list(tmp_path.iterdir()) == []
    if args[0] == "estate":  # prints SQL from the configuration: needs no database
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 6
    assert one_line(result.stderr) == (
        f"queuebot: the SQLite database {tmp_path}/queuebot.db (the default, as "
        "QUEUEBOT_DATABASE_URL is not set) does not exist: run `queuebot db upgrade` to create "
        "it (or `queuebot demo` to try queuebot), or point QUEUEBOT_DATABASE_URL at "
        "queuebot's database"
    )


def test_config_check_creates_no_queue_database_either(demo: Demo, tmp_path: Path) -> None:
    missing = tmp_path / "jobs.db"
    result = queuebot(
        "config",
        "check",
        cwd=demo.dir,
        env=demo.env(QUEUEBOT_QUEUE_DATABASE_URL=f"sqlite:///{missing}"),
    )
    assert result.returncode == 5
    assert one_line(result.stderr) == (
        f"queuebot: the SQLite database {missing} (QUEUEBOT_QUEUE_DATABASE_URL) does not "
        "exist: point QUEUEBOT_QUEUE_DATABASE_URL at the file that holds your queue tables"
    )
    assert not missing.exists()


@pytest.mark.parametrize(
    "args",
    [("db", "upgrade"), ("config", "check"), ("console",), ("serve", "--port", "0")],
    ids=" ".join,
)
def test_a_missing_sqlite_directory_is_one_line_and_exit_5(tmp_path: Path, args: list[str]) -> None:
    env = {"QUEUEBOT_DATABASE_URL": f"sqlite:///{tmp_path}/nowhere/queuebot.db"}
    result = queuebot(*args, cwd=tmp_path, env=env)
    assert result.returncode == 5
    assert one_line(result.stderr) == (
        f"queuebot: the directory {tmp_path}/nowhere of the SQLite database queuebot.db "
        "(QUEUEBOT_DATABASE_URL) does not exist: create it, or point QUEUEBOT_DATABASE_URL "
        "elsewhere"
    )


def test_demo_takes_config_and_log_level_as_every_command_does(tmp_path: Path) -> None:
    """README: every command takes --config and --log-level, before or after its name. For
    the demo, --config names its configuration file: written there when absent, read from
    there when present (an edited one is kept)."""
    mine = tmp_path / "mine.toml"
    first = queuebot(
        "demo", "--config", str(mine), "--log-level", "info", stdin="/queue help\n", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    assert f"config in {mine}." in first.stdout
    assert "[people.alice]" in mine.read_text()
    assert not (tmp_path / "queuebot.demo.toml").exists()
    assert "/queue triage" in replies(first.stdout)["/queue help"]
    mine.write_text(mine.read_text().replace("[people.dora]", "[people.erin]"))
    again = queuebot(
        "--config", str(mine), "demo", "--as", "erin", "--log-level", "ERROR", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert "[people.erin]" in mine.read_text()  # kept as edited
    debug = queuebot("demo", "--log-level", "DEBUG", cwd=tmp_path)
    assert debug.returncode == 0, debug.stderr
    assert "DEBUG" in debug.stderr


def test_estate_indexes_prints_without_print_too(tmp_path: Path) -> None:
    """It has no other mode: --print is accepted, not required."""
    plain = queuebot("estate", "indexes", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("-- queuebot: recommended indexes for your queue tables")
    printed = queuebot("estate", "indexes", "--print", cwd=tmp_path)
    assert (printed.returncode, printed.stdout) == (0, plain.stdout)


def test_serve_help_says_what_it_does_its_defaults_and_its_environment(tmp_path: Path) -> None:
    from services.config import EnvSettings

    result = queuebot("serve", "--help", cwd=tmp_path, env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "Run the bot:" in text
    assert "(default: 127.0.0.1)" in text and "(default: 8080)" in text
    variables = {str(f.validation_alias) for f in EnvSettings.model_fields.values()}
    assert "QUEUEBOT_DATABASE_URL" in variables
    for variable in variables | {"QUEUEBOT_LOG_LEVEL"}:
        assert re.search(rf"^  {variable} ", text, re.MULTILINE), variable


HELPS = [
    (),
    ("serve",),
    ("console",),
    ("demo",),
    ("db", "grant"),
    ("db", "prune"),
    ("estate", "indexes"),
    ("audit", "verify"),
    ("housekeep",),
    ("runbook", "check"),
]


@pytest.mark.parametrize("args", HELPS, ids=lambda a: " ".join(a) or "queuebot")
def test_help_is_plain_text_that_fits_the_terminal(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = queuebot(*args, "--help", cwd=tmp_path, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert "`" not in result.stdout, result.stdout
    for line in result.stdout.splitlines():
        assert len(line) <= 80, line
    if not args:  # each command's line is whole: serve names every platform it runs
        assert "Slack, Discord" in result.stdout
        assert "130  interrupted" in result.stdout


def test_demo_refuses_a_config_without_its_queues_in_one_line(tmp_path: Path) -> None:
    mine = tmp_path / "team.toml"
    mine.write_text('[queues.jobs]\nprofile = "worker_queue"\n')
    result = queuebot("demo", "--config", str(mine), "--fresh", cwd=tmp_path)
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"queuebot: demo --config {mine}: the demo needs the queues clips (message_job), "
        f"workers (worker_queue), as in the file `queuebot demo` writes; {mine} has jobs "
        "(worker_queue). Name a file that does not exist yet (the demo writes its "
        "configuration there), or leave --config out"
    )
    assert mine.read_text() == '[queues.jobs]\nprofile = "worker_queue"\n'  # never rewritten


def test_config_check_reports_a_runbook_audience_no_channel_carries(
    demo: Demo, tmp_path: Path
) -> None:
    """Without [channels.actors], the shipped runbooks' actors would be told nowhere: each
    runbook telling them is a problem, with how to give them a channel."""
    config = tmp_path / "queuebot.toml"
    text = DEMO_CONFIG.format(config=config)
    assert '[channels.actors]\nslack = "C0ACTORS"\n' in text
    config.write_text(text.replace('[channels.actors]\nslack = "C0ACTORS"\n', ""))
    result = queuebot("config", "check", cwd=demo.dir, env=demo.env(QUEUEBOT_CONFIG=str(config)))
    assert result.returncode == 1, result.stderr  # a problem found
    problems = [line for line in result.stderr.splitlines() if "tells the actors" in line]
    assert problems and all("add [channels.actors]" in line for line in problems)
    assert "gd:queue-loss" in result.stderr
    assert "tells the operators" not in result.stderr
