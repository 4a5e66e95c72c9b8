"""Configuration (services/config/): a bad file is refused naming the file, the key, the
value and what was expected; secrets never show; the defaults give the demo estate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.config import (
    DEFAULT_DATABASE_URL,
    AccessConfig,
    Config,
    FileConfig,
    load_config,
    parse_file_config,
)
from services.db import create_engine, redacted
from services.errors import ConfigError

GOOD_TOML = """\
[queues.clips]
profile = "message_job"

[queues.workers]
profile = "worker_queue"
table = "dev_r_worker_queue"
stuck_after_minutes = 20

[channels.alerts]
slack = "C0ALERTS"
discord = "200000000000000001"
[channels.operators]
slack = "C0OPS"

[people.alice]
slack = "U0ALICE"
discord = "100000000000000001"
roles = ["operator", "approver"]

[people.dora]
slack = "U0DORA"
roles = ["duty-officer", "operator"]

[roles]
"operations duty officer" = "duty-officer"
"service on-call" = "operator"

[approval]
expiry_minutes = 45

[access]
unknown_users = "deny"

[runbooks]
dir = "runbooks"
"""


ENV_VARS = (
    "QUEUEBOT_CONFIG",
    "QUEUEBOT_DATABASE_URL",
    "QUEUEBOT_QUEUE_DATABASE_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "SLACK_API_BASE_URL",
    "DISCORD_BOT_TOKEN",
    "DISCORD_API_BASE_URL",
    "QUEUEBOT_ALERT_TOKEN",
    "QUEUEBOT_CLAIM_STALE_SECONDS",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_config reads ./queuebot.toml when present, and the process environment when
    given no mapping: run every test in an empty folder with none of its variables."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, text: str, name: str = "queuebot.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    return path, str(info.value)


# ---------------------------------------------------------------------------------------
# Good files


def test_good_file_loads(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_TOML)
    config = load_config(path, environ={})

    assert config.source == path
    assert list(config.queues) == ["clips", "workers"]
    assert config.queues["clips"].profile == "message_job"
    workers = config.queues["workers"]
    assert workers.profile == "worker_queue"
    assert workers.table == "dev_r_worker_queue"
    assert workers.stuck_after_minutes == 20
    assert config.file.channels["alerts"].discord == "200000000000000001"
    alice = config.file.people["alice"]
    assert (alice.slack, alice.discord, alice.roles) == (
        "U0ALICE",
        "100000000000000001",
        ["operator", "approver"],
    )
    assert config.file.roles["operations duty officer"] == "duty-officer"
    assert config.file.approval.expiry_minutes == 45
    assert config.file.access == AccessConfig(unknown_users="deny")
    assert config.file.runbooks.dir == "runbooks"


def test_a_removed_setting_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "[slack]\nanswer_workers = 2\n")
    with caplog.at_level("WARNING", logger="queuebot.config"):
        load_config(path, environ={})
    assert "[slack] answer_workers is no longer read and is ignored" in caplog.text
    assert "run more `queuebot serve` replicas" in caplog.text
    _, message = config_error(tmp_path, "[slack]\nanswer_workers = 2\nsocket = true\n")
    assert "slack" in message


def test_single_queue_section_is_the_main_queue(tmp_path: Path) -> None:
    path = write(tmp_path, '[queue]\nprofile = "message_job"\n')
    config = load_config(path, environ={})
    assert list(config.queues) == ["main"]
    assert config.queues["main"].profile == "message_job"


def test_queuebot_config_variable_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[queue]\nprofile = "worker_queue"\n')
    config = load_config(environ={"QUEUEBOT_CONFIG": str(path)})
    assert config.source == path
    assert config.queues["main"].profile == "worker_queue"


def test_explicit_path_wins_over_the_variable(tmp_path: Path) -> None:
    chosen = write(tmp_path, '[queue]\nprofile = "worker_queue"\n', "chosen.toml")
    other = write(tmp_path, '[queue]\nprofile = "message_job"\n', "other.toml")
    config = load_config(chosen, environ={"QUEUEBOT_CONFIG": str(other)})
    assert config.source == chosen
    assert config.queues["main"].profile == "worker_queue"


def test_queuebot_toml_in_the_working_folder_is_read_when_present() -> None:
    Path("queuebot.toml").write_text('[queue]\nprofile = "worker_queue"\n', encoding="utf-8")
    config = load_config(environ={})
    assert config.source == Path("queuebot.toml")
    assert config.queues["main"].profile == "worker_queue"


def test_default_config_without_a_file() -> None:
    config = load_config(environ={})
    assert config.source is None
    assert {name: q.profile for name, q in config.queues.items()} == {
        "clips": "message_job",
        "workers": "worker_queue",
    }
    assert list(config.queues) == ["clips", "workers"]  # the first is the default
    assert config.env.state_url == DEFAULT_DATABASE_URL == "sqlite:///./queuebot.db"
    assert config.env.estate_url == DEFAULT_DATABASE_URL
    assert config.env.slack_api_base_url == "https://slack.com/api/"
    assert config.env.discord_api_base_url == "https://discord.com/api/v10"
    assert config.file.access.unknown_users == "read-only"
    assert config.file.approval.expiry_minutes == 30


def test_the_default_database_is_shown_as_people_write_it() -> None:
    """config check and serve's log show the default database as the README
    names it, not in the form of the driver queuebot picks for it."""
    config = load_config(environ={})
    assert redacted(config.env.state_url) == "sqlite:///./queuebot.db"
    assert redacted(create_engine(config.env.state_url).url) == "sqlite:///./queuebot.db"


def test_explicit_environ_ignores_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", "postgresql+psycopg://leak@db/leak")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-leak")
    config = load_config(environ={})
    assert config.env.state_url == DEFAULT_DATABASE_URL
    assert config.env.slack_bot_token is None


def test_explicit_environ_wins_over_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", "postgresql+psycopg://process@db/process")
    config = load_config(environ={"QUEUEBOT_DATABASE_URL": "sqlite+aiosqlite:///given.db"})
    assert config.env.state_url == "sqlite+aiosqlite:///given.db"


def test_queue_database_defaults_to_the_state_database() -> None:
    config = load_config(environ={"QUEUEBOT_DATABASE_URL": "sqlite+aiosqlite:///state.db"})
    assert config.env.estate_url == "sqlite+aiosqlite:///state.db"
    config = load_config(
        environ={
            "QUEUEBOT_DATABASE_URL": "sqlite+aiosqlite:///state.db",
            "QUEUEBOT_QUEUE_DATABASE_URL": "sqlite+aiosqlite:///estate.db",
        }
    )
    assert config.env.state_url == "sqlite+aiosqlite:///state.db"
    assert config.env.estate_url == "sqlite+aiosqlite:///estate.db"


# ---------------------------------------------------------------------------------------
# Bad files: ConfigError naming file, key path, value and what was expected


def test_bad_role(tmp_path: Path) -> None:
    path, message = config_error(tmp_path, '[people.alice]\nroles = ["operator", "admin"]\n')
    assert message.startswith(f"{path}: ")
    assert "people.alice.roles.1 = 'admin'" in message
    assert "'viewer', 'operator', 'approver' or 'duty-officer'" in message


@pytest.mark.parametrize(
    ("toml", "key", "value", "expected"),
    [
        (
            '[people.alice]\nslack = "alice"\n',
            "people.alice.slack",
            "'alice'",
            "a Slack user id such as U0ALICE",
        ),
        (
            '[people.alice]\nslack = "C0ALERTS"\n',
            "people.alice.slack",
            "'C0ALERTS'",
            "a Slack user id such as U0ALICE",
        ),
        (
            '[people.alice]\ndiscord = "alice#1234"\n',
            "people.alice.discord",
            "'alice#1234'",
            "a Discord id (15-21 digits)",
        ),
        (
            '[channels.alerts]\nslack = "U0ALICE"\n',
            "channels.alerts.slack",
            "'U0ALICE'",
            "a Slack channel id such as C0ALERTS",
        ),
    ],
)
def test_bad_chat_ids(tmp_path: Path, toml: str, key: str, value: str, expected: str) -> None:
    path, message = config_error(tmp_path, toml)
    assert message == f"{path}: {key} = {value}: expected {expected}"


@pytest.mark.parametrize(
    "toml",
    [
        '[people.alice]\nslack = "U0ALICE\\n"\n',
        '[queue]\nprofile = "worker_queue"\ntable = "jobs\\n"\n',
    ],
    ids=["slack-id", "sql-identifier"],
)
def test_values_with_a_trailing_newline_are_refused(tmp_path: Path, toml: str) -> None:
    _, message = config_error(tmp_path, toml)
    assert "\\n': expected a" in message  # the value shown with its newline, then why


def test_unsafe_table_name(tmp_path: Path) -> None:
    path, message = config_error(
        tmp_path, '[queue]\nprofile = "worker_queue"\ntable = "jobs; drop table x"\n'
    )
    assert message.startswith(f"{path}: queue.table = 'jobs; drop table x': expected a SQL")


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        pytest.param(
            "[approval]\nexpiry = 30\n",
            "approval.expiry = 30: unknown key; did you mean expiry_minutes?",
            id="unknown-key",
        ),
        pytest.param(
            '[queue]\nprofile = "redis"\n',
            "queue.profile = 'redis': Input should be 'worker_queue' or 'message_job'",
            id="bad-profile",
        ),
        pytest.param(
            "[approval]\nexpiry_minutes = 0\n",
            "approval.expiry_minutes = 0: Input should be greater than or equal to 1",
            id="number-out-of-range",
        ),
    ],
)
def test_a_mistake_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, toml: str, said: str
) -> None:
    path, message = config_error(tmp_path, toml)
    assert message == f"{path}: {said}"


def test_unknown_section(tmp_path: Path) -> None:
    path, message = config_error(tmp_path, "[alarms]\nroute = 1\n")
    assert message == f"{path}: alarms: unknown key; did you mean alerts?"
    _, far = config_error(tmp_path, "[zebra]\nx = 1\n")
    assert far.endswith(": zebra: unknown key")  # nothing close: no guess


def test_a_route_must_name_configured_channels_and_queues(tmp_path: Path) -> None:
    route = '[[alerts.routes]]\nname = "r"\nchannels = ["pager"]\n'
    _, message = config_error(tmp_path, '[channels.alerts]\nslack = "C0ALERTS"\n' + route)
    assert "alerts.routes.0 (r): channel 'pager' is not in [channels] (known: alerts)" in message
    route = '[[alerts.routes]]\nname = "r"\nchannels = ["alerts"]\nqueue = "nope"\n'
    _, message = config_error(tmp_path, '[channels.alerts]\nslack = "C0ALERTS"\n' + route)
    assert "queue 'nope' is not configured (configured: clips, workers)" in message


def test_the_http_body_limit_defaults_to_256_kb_and_is_bounded(tmp_path: Path) -> None:
    assert FileConfig().http.max_body_kb == 256
    good = load_config(write(tmp_path, "[http]\nmax_body_kb = 1024\n"), environ={})
    assert good.file.http.max_body_kb == 1024
    for value, expected in [
        (8, "Input should be greater than or equal to 16"),
        (100_000, "Input should be less than or equal to 16384"),
        ('"big"', "Input should be a valid integer, unable to parse string as an integer"),
    ]:
        path, message = config_error(tmp_path, f"[http]\nmax_body_kb = {value}\n")
        shown = repr(value.strip('"')) if isinstance(value, str) else value
        assert message == f"{path}: http.max_body_kb = {shown}: {expected}"


def test_the_readyz_freshness_defaults_to_5_s_and_is_bounded(tmp_path: Path) -> None:
    assert FileConfig().http.readyz_fresh_seconds == 5
    good = load_config(write(tmp_path, "[http]\nreadyz_fresh_seconds = 1\n"), environ={})
    assert good.file.http.readyz_fresh_seconds == 1
    for value, expected in [
        (0.5, "Input should be greater than or equal to 1"),
        (301, "Input should be less than or equal to 300"),
    ]:
        path, message = config_error(tmp_path, f"[http]\nreadyz_fresh_seconds = {value}\n")
        assert message == f"{path}: http.readyz_fresh_seconds = {value}: {expected}"


def test_slow_and_surplus_http_clients_are_bounded_by_default(tmp_path: Path) -> None:
    http = FileConfig().http
    assert (http.header_timeout_seconds, http.body_timeout_seconds) == (10, 10)
    assert http.max_connections == 500
    good = load_config(
        write(
            tmp_path,
            "[http]\nheader_timeout_seconds = 5\nbody_timeout_seconds = 30\n"
            "max_connections = 2000\n",
        ),
        environ={},
    )
    assert good.file.http.header_timeout_seconds == 5
    assert good.file.http.body_timeout_seconds == 30
    assert good.file.http.max_connections == 2000
    for setting, value, expected in [
        ("header_timeout_seconds", 0, "Input should be greater than or equal to 1"),
        ("body_timeout_seconds", 301, "Input should be less than or equal to 300"),
        ("max_connections", 8, "Input should be greater than or equal to 16"),
        ("max_connections", 1_000_000, "Input should be less than or equal to 100000"),
    ]:
        path, message = config_error(tmp_path, f"[http]\n{setting} = {value}\n")
        assert message == f"{path}: http.{setting} = {value}: {expected}"


def test_the_metrics_refresh_defaults_to_15_s_and_is_bounded(tmp_path: Path) -> None:
    assert FileConfig().metrics.refresh_seconds == 15
    good = load_config(write(tmp_path, "[metrics]\nrefresh_seconds = 60\n"), environ={})
    assert good.file.metrics.refresh_seconds == 60
    for value, expected in [
        (0.5, "Input should be greater than or equal to 1"),
        (7200, "Input should be less than or equal to 3600"),
    ]:
        path, message = config_error(tmp_path, f"[metrics]\nrefresh_seconds = {value}\n")
        assert message == f"{path}: metrics.refresh_seconds = {value}: {expected}"
    path, message = config_error(tmp_path, "[metrics]\nrefresh = 5\n")
    assert "metrics.refresh" in message


@pytest.mark.parametrize(
    ("toml", "parts"),
    [
        pytest.param(
            '[roles]\n"on-call" = "boss"\n',
            ["roles.on-call = 'boss'", "'duty-officer'"],
            id="bad-role-in-the-roles-table",
        ),
        pytest.param(
            '[queue]\nprofile = "worker_queue"\n[queues.x]\nprofile = "message_job"\n',
            ["use either [queue] or [queues.NAME], not both"],
            id="queue-and-queues-together",
        ),
        pytest.param(
            '[people.alice]\nslack = "U0ALICE"\n[people.bob]\nslack = "U0ALICE"\n',
            [
                "people.bob.slack = 'U0ALICE' is already people.alice.slack",
                "one account belongs to one person",
            ],
            id="duplicate-slack-account-across-two-people",
        ),
        pytest.param(
            '[people.Alice]\nslack = "U0ALICE"\n',
            ["name 'Alice' must be lower-case letters"],
            id="bad-person-name",
        ),
    ],
)
def test_a_mistake_names_the_file_and_says_what_is_wrong(
    tmp_path: Path, toml: str, parts: list[str]
) -> None:
    path, message = config_error(tmp_path, toml)
    assert str(path) in message
    for part in parts:
        assert part in message


def test_duplicate_discord_account_across_two_people(tmp_path: Path) -> None:
    _, message = config_error(
        tmp_path,
        '[people.alice]\ndiscord = "100000000000000001"\n'
        '[people.bob]\ndiscord = "100000000000000001"\n',
    )
    assert "people.bob.discord = '100000000000000001' is already people.alice.discord" in message


def test_same_id_on_two_platforms_of_one_person_is_fine() -> None:
    config = parse_file_config(
        {"people": {"alice": {"slack": "U0ALICE"}, "bob": {"slack": "U0BOB"}}}, where="x"
    )
    assert set(config.people) == {"alice", "bob"}
    # what the name says: one person may carry the same digits as Slack and Discord ids
    same = parse_file_config(
        {"people": {"carol": {"slack": "U100000000000000001", "discord": "100000000000000001"}}},
        where="x",
    )
    assert same.people["carol"].discord == "100000000000000001"


def test_every_error_is_reported(tmp_path: Path) -> None:
    _, message = config_error(
        tmp_path, '[people.alice]\nslack = "alice"\nroles = ["admin"]\n[approval]\nx = 1\n'
    )
    lines = message.splitlines()
    assert len(lines) == 3
    assert any("people.alice.slack" in line for line in lines)
    assert any("people.alice.roles.0" in line for line in lines)
    assert any("approval.x" in line for line in lines)


def test_invalid_toml(tmp_path: Path) -> None:
    path, message = config_error(tmp_path, '[queue\nprofile = "worker_queue"\n')
    assert message.startswith(f"{path}: not valid TOML: ")
    assert "line 1" in message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[runbooks]\ndir = "r\xe9"\n')
    with pytest.raises(ConfigError, match="not valid TOML") as info:
        load_config(path, environ={})
    assert str(path) in str(info.value)


def test_missing_explicit_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"cannot read config file {path}: No such file or directory"


def test_missing_file_named_by_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"cannot read config file .*nope\.toml"):
        load_config(environ={"QUEUEBOT_CONFIG": str(path)})


def test_bad_environment_value() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={"SLACK_API_BASE_URL": "slack.com/api"})
    assert str(info.value) == (
        "environment: SLACK_API_BASE_URL = 'slack.com/api': expected an http(s) URL"
    )


def test_claim_staleness_is_a_validated_setting() -> None:
    assert load_config(environ={}).env.claim_stale_seconds is None  # the ledger's default
    env = load_config(environ={"QUEUEBOT_CLAIM_STALE_SECONDS": "7.5"}).env
    assert env.claim_stale_seconds == 7.5
    with pytest.raises(ConfigError) as info:
        load_config(environ={"QUEUEBOT_CLAIM_STALE_SECONDS": "2"})
    assert str(info.value) == (
        "environment: QUEUEBOT_CLAIM_STALE_SECONDS = '2': "
        "Input should be greater than or equal to 5"
    )
    with pytest.raises(ConfigError, match="QUEUEBOT_CLAIM_STALE_SECONDS = 'soon'"):
        load_config(environ={"QUEUEBOT_CLAIM_STALE_SECONDS": "soon"})


# ---------------------------------------------------------------------------------------
# Secrets

SECRETS = {
    "QUEUEBOT_DATABASE_URL": "postgresql+psycopg://qb:hunter2-state@db/queuebot",
    "QUEUEBOT_QUEUE_DATABASE_URL": "postgresql+psycopg://qb:hunter2-estate@db/estate",
    "SLACK_BOT_TOKEN": "xoxb-secret-bot-token",
    "SLACK_SIGNING_SECRET": "signing-secret-value",
    "SLACK_APP_TOKEN": "xapp-secret-app-token",
    "DISCORD_BOT_TOKEN": "discord-secret-token",
    "QUEUEBOT_ALERT_TOKEN": "alert-secret-token",
}


def test_secrets_do_not_appear_in_repr_or_str(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD_TOML), environ=SECRETS)
    shown = [repr(config), str(config), repr(config.env), str(config.env)]
    for secret in SECRETS.values():
        for text in shown:
            assert secret not in text
            assert "hunter2" not in text
    # but the code that needs them can read them
    assert config.env.state_url == SECRETS["QUEUEBOT_DATABASE_URL"]
    assert config.env.estate_url == SECRETS["QUEUEBOT_QUEUE_DATABASE_URL"]
    assert config.env.slack_bot_token is not None
    assert config.env.slack_bot_token.get_secret_value() == SECRETS["SLACK_BOT_TOKEN"]


def test_secrets_do_not_appear_in_environment_errors() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={**SECRETS, "DISCORD_API_BASE_URL": "nope"})
    for secret in SECRETS.values():
        assert secret not in str(info.value)


# ---------------------------------------------------------------------------------------
# Property: any TOML-shaped data gives a FileConfig or a ConfigError naming the file

KEYS = [
    "queue",
    "queues",
    "channels",
    "people",
    "roles",
    "approval",
    "access",
    "runbooks",
    "profile",
    "table",
    "tables",
    "columns",
    "slack",
    "discord",
    "expiry_minutes",
    "unknown_users",
    "dir",
    "alice",
    "bob",
    "clips",
    "jobs.id",
]
scalars = st.one_of(
    st.sampled_from(
        [
            "worker_queue",
            "message_job",
            "U0ALICE",
            "C0ALERTS",
            "100000000000000001",
            "operator",
            "deny",
            "jobs",
        ]
    ),
    st.text(max_size=12),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.sampled_from(["operator", "approver", "admin"]), max_size=3),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
toml_values = st.recursive(
    scalars, lambda inner: st.dictionaries(keys, inner, max_size=4), max_leaves=10
)


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(keys, toml_values, max_size=5))
def test_any_toml_data_loads_or_is_refused_naming_the_file(data: dict[str, Any]) -> None:
    try:
        result = parse_file_config(data, where="conf/queuebot.toml")
    except ConfigError as err:
        # one line per problem, each naming the file (a key may itself hold a line break)
        assert str(err).startswith("conf/queuebot.toml: ")
    else:
        assert isinstance(result, FileConfig)
        assert result.queue_map()


def test_config_is_a_plain_value() -> None:
    config = load_config(environ={})
    assert isinstance(config, Config)
    assert isinstance(config.file, FileConfig)


# ---------------------------------------------------------------------------------------
# [queue.statuses]: the team's status values mapped onto the profile's states


def test_a_status_mapping_loads_per_queue(tmp_path: Path) -> None:
    text = (
        '[queues.clips]\nprofile = "message_job"\n'
        '[queues.clips.statuses]\ndead = ["DLQ", "DEAD_LETTER"]\nfailed = ["ERRORED"]\n'
        '[queues.workers]\nprofile = "worker_queue"\n'
    )
    queues = load_config(write(tmp_path, text), environ={}).queues
    assert queues["clips"].statuses == {"dead": ["DLQ", "DEAD_LETTER"], "failed": ["ERRORED"]}
    assert queues["workers"].statuses == {}


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        (
            'deadd = ["DLQ"]',
            "'deadd' is not a state; map status values onto one of pending, in_flight, "
            "succeeded, failed, dead, cancelled",
        ),
        ('unknown = ["X"]', "'unknown' is not a state"),
        ("dead = []", 'dead must be a non-empty list of status values, e.g. dead = ["DEAD"]'),
        ('dead = "DLQ"', "dead must be a non-empty list of status values"),
        ('dead = [""]', "dead: '' is not a status value (a non-empty string)"),
        ("dead = [3]", "dead: 3 is not a status value (a non-empty string)"),
        ('dead = [" DLQ"]', "dead: ' DLQ' must not begin or end with white space"),
        (
            'dead = ["DLQ"]\nfailed = ["DLQ"]',
            "status value 'DLQ' is listed under dead and failed; a value means one state",
        ),
        ('dead = ["DLQ", "DLQ"]', "status value 'DLQ' is listed twice"),
    ],
)
def test_a_bad_status_mapping_is_refused_saying_why(
    tmp_path: Path, mapping: str, expected: str
) -> None:
    text = f'[queue]\nprofile = "message_job"\n[queue.statuses]\n{mapping}\n'
    path, message = config_error(tmp_path, text)
    assert message.startswith(f"{path}: queue.statuses: ")
    assert expected in message


@pytest.mark.parametrize("blank", ["", "  ", "\n"])
def test_an_empty_slack_variable_counts_as_not_set(blank: str) -> None:
    """A deploy template's `SLACK_SIGNING_SECRET=` is no secret: it counts as missing (so
    serve never checks signatures against an empty key), and config check can say so."""
    env = load_config(
        environ={
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": blank,
            "SLACK_APP_TOKEN": blank,
            "SLACK_API_BASE_URL": blank,
        }
    ).env
    assert env.slack_signing_secret is None and env.slack_app_token is None
    assert env.slack_api_base_url == "https://slack.com/api/"
    assert env.slack_bot_token is not None
    assert env.empty == {"SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_BASE_URL"}


def test_an_empty_slack_variable_in_the_process_environment_counts_as_not_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "")
    env = load_config().env
    assert env.slack_signing_secret is None and env.empty == {"SLACK_SIGNING_SECRET"}


@pytest.mark.parametrize("blank", ["", "  ", "\n"])
def test_an_empty_alert_token_counts_as_not_set(blank: str) -> None:
    """`QUEUEBOT_ALERT_TOKEN=` is no secret: it counts as missing, so config check and
    serve's start say alerts are taken without a token, instead of "set"."""
    env = load_config(environ={"QUEUEBOT_ALERT_TOKEN": blank}).env
    assert env.alert_token is None
    assert env.empty == {"QUEUEBOT_ALERT_TOKEN"}


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("tiny-tok", "must be at least 16 characters (a shorter one is no secret)"),
        ("fifteen-chars-x", "must be at least 16 characters (a shorter one is no secret)"),
        (" a-token-long-enough-to-be-one", "must not begin or end with white space"),
        ("a-token-long-enough-to-be-one\n", "must not begin or end with white space"),
    ],
)
def test_an_alert_token_too_short_to_be_a_secret_is_refused(token: str, said: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={"QUEUEBOT_ALERT_TOKEN": token})
    message = str(info.value)
    assert message.startswith(f"environment: QUEUEBOT_ALERT_TOKEN: {said}"), message
    assert "\n" not in message
    assert token.strip() not in message  # never the value


def test_an_alert_token_of_16_characters_is_taken() -> None:
    env = load_config(environ={"QUEUEBOT_ALERT_TOKEN": "sixteen-chars-ok"}).env
    assert env.alert_token is not None
    assert env.alert_token.get_secret_value() == "sixteen-chars-ok"


def test_a_nul_character_in_any_string_or_key_of_the_file_is_refused_naming_where() -> None:
    """Checked once over the whole parsed file, so no section can forget it: values deep in
    lists and tables, and keys themselves (a label name, a [roles] title)."""
    data = {
        "alerts": {"routes": [{"name": "r", "channels": ["ops"], "labels": {"team": "a\x00"}}]},
        "roles": {"duty\x00officer": "operator"},
        "runbooks": {"dir": "/srv/run\x00books"},
    }
    with pytest.raises(ConfigError) as caught:
        parse_file_config(data, where="team.toml")
    assert caught.value.message.splitlines() == [
        "team.toml: alerts.routes[0].labels.team: contains a NUL character (\\x00), which "
        "PostgreSQL cannot store; remove it",
        'team.toml: roles: the key "duty\\u0000officer" contains a NUL character (\\x00), '
        "which PostgreSQL cannot store; rename it",
        "team.toml: runbooks.dir: contains a NUL character (\\x00), which PostgreSQL cannot "
        "store; remove it",
    ]
