"""Configuration: one optional TOML file plus fixed environment variables (secrets and
database URLs come only from the environment).

Secrets (tokens, signing secret, database URLs that may carry passwords) come only from
the environment, are held as ``SecretStr`` and never logged. Everything else lives in the
TOML file, which is validated strictly: an unknown key or a bad value is refused with the
key, the value and what was expected.
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from services.alert_settings import AlertsConfig
from services.config_hints import did_you_mean
from services.errors import ConfigError
from services.housekeeping_settings import HousekeepingConfig
from services.identifiers import validate_identifier
from services.incident_settings import IncidentsConfig

log = logging.getLogger("queuebot.config")

Role = Literal["viewer", "operator", "approver", "duty-officer"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "approver", "duty-officer")
ProfileName = Literal["worker_queue", "message_job"]
# The states every profile maps its own status values onto (services/estate/model.py
# CanonicalState, without ``unknown``: nothing is mapped to "not known").
CanonicalStateName = Literal["pending", "in_flight", "succeeded", "failed", "dead", "cancelled"]
CANONICAL_STATE_NAMES: tuple[CanonicalStateName, ...] = (
    "pending",
    "in_flight",
    "succeeded",
    "failed",
    "dead",
    "cancelled",
)
STATUS_VALUE_MAX = 200

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./queuebot.db"
DEFAULT_CONFIG_PATH = Path("queuebot.toml")
_EXPLICIT_ENVIRON: ContextVar[bool] = ContextVar("queuebot_explicit_environ", default=False)

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,20}\Z")
_SLACK_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,20}\Z")
_SNOWFLAKE = re.compile(r"^[0-9]{15,21}\Z")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
AUDIT_KEY_MIN_LENGTH = 32
# The bearer token Alertmanager sends: shorter than this is no secret (a guess, a word, a
# placeholder left in a template). `openssl rand -hex 16` makes one of 32 characters.
ALERT_TOKEN_MIN_LENGTH = 16
# A delivery's claim is refreshed every 2 s while its work runs (services/ledger.py
# HEARTBEAT); one unrefreshed for less than two and a half beats may belong to a live owner.
MIN_CLAIM_STALE_SECONDS = 5.0

# Chat platform variables and the alerts token: one set to nothing (or blanks) counts as
# not set. A deploy template often writes `SLACK_SIGNING_SECRET=` or
# `QUEUEBOT_ALERT_TOKEN=` for a value it did not fill in.
BLANK_IS_UNSET = ("SLACK_", "DISCORD_", "QUEUEBOT_ALERT_TOKEN")


def _pattern(regex: re.Pattern[str], expected: str) -> Any:
    def check(value: str) -> str:
        if not regex.match(value):
            raise ValueError(f"expected {expected}")
        return value

    return AfterValidator(check)


SlackUserId = Annotated[str, _pattern(_SLACK_USER, "a Slack user id such as U0ALICE")]
SlackChannelId = Annotated[str, _pattern(_SLACK_CHANNEL, "a Slack channel id such as C0ALERTS")]
Snowflake = Annotated[str, _pattern(_SNOWFLAKE, "a Discord id (15-21 digits)")]
Identifier = Annotated[str, AfterValidator(validate_identifier)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChannelConfig(_Strict):
    slack: SlackChannelId | None = None
    discord: Snowflake | None = None


class PersonConfig(_Strict):
    slack: SlackUserId | None = None
    discord: Snowflake | None = None
    roles: list[Role] = Field(default_factory=list)


class QueueConfig(_Strict):
    """One queue estate reached through a profile, with optional name overrides.

    ``table`` renames the main table (worker_queue); ``tables`` renames any table by its
    role (worker_queue: ``queue``; message_job: ``messages``, ``jobs``, ``events``,
    ``assets``); ``columns`` renames columns as ``"role.column" = "actual"``.
    ``statuses`` maps the team's own status values onto canonical states, e.g.
    ``dead = ["DLQ", "DEAD_LETTER"]``: they mean the same as the profile's own values of
    that state (docs/profiles.md says how writes treat them).
    """

    profile: ProfileName
    table: Identifier | None = None
    tables: dict[str, Identifier] = Field(default_factory=dict)
    columns: dict[str, Identifier] = Field(default_factory=dict)
    statuses: dict[CanonicalStateName, list[str]] = Field(default_factory=dict)
    stuck_after_minutes: int = Field(default=15, ge=1, le=24 * 60)

    # where it was written: the file and its section ("queue" or "queues.NAME"); None for
    # the demo's queues, used when no queue is configured (set by ``parse_file_config``)
    _file: str | None = PrivateAttr(default=None)
    _section: str | None = PrivateAttr(default=None)

    @property
    def section(self) -> str | None:
        return self._section

    def key(self, name: str) -> str:
        """A key of this queue's section as a person finds it: ``queuebot.toml:
        queues.jobs.tables.jobs``; for the demo's queues, the key alone."""
        if self._section is None:
            return name
        prefix = f"{self._file}: " if self._file else ""
        return f"{prefix}{self._section}.{name}"

    @field_validator("statuses", mode="before")
    @classmethod
    def _status_mapping(cls, value: Any) -> Any:
        """Keys are canonical states; values non-empty lists of non-empty status values,
        no value listed twice or under two states."""
        if not isinstance(value, dict):
            return value  # pydantic says what type was expected
        seen: dict[str, str] = {}
        for state, values in value.items():
            if state not in CANONICAL_STATE_NAMES:
                raise ValueError(
                    f"{state!r} is not a state; map status values onto one of "
                    f"{', '.join(CANONICAL_STATE_NAMES)}"
                )
            if not isinstance(values, list) or not values:
                raise ValueError(
                    f"{state} must be a non-empty list of status values, e.g. "
                    f'{state} = ["{state.upper()}"]'
                )
            for item in values:
                if not isinstance(item, str) or not item.strip():
                    raise ValueError(
                        f"{state}: {item!r} is not a status value (a non-empty string)"
                    )
                if item != item.strip() or len(item) > STATUS_VALUE_MAX:
                    raise ValueError(
                        f"{state}: {item!r} must not begin or end with white space and must "
                        f"be at most {STATUS_VALUE_MAX} characters"
                    )
                if item in seen:
                    where = "twice" if seen[item] == state else f"under {seen[item]} and {state}"
                    raise ValueError(
                        f"status value {item!r} is listed {where}; a value means one state"
                    )
                seen[item] = state
        return value

    @field_validator("columns")
    @classmethod
    def _column_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[a-z_]+\.[a-z_]+\Z", key):
                raise ValueError(f"column override key {key!r} must look like 'role.column'")
        return value


class ApprovalConfig(_Strict):
    expiry_minutes: int = Field(default=30, ge=1, le=24 * 60)
    large_change_rows: int = Field(default=100, ge=1)
    large_change_approvals: int = Field(default=2, ge=1, le=5)


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    return value


class RedriveConfig(_Strict):
    """Staged redrive: a sample, then waves that grow while they succeed."""

    sample: int = Field(default=5, ge=1, le=5)
    first_wave: int = Field(default=10, ge=1, le=10_000)
    max_wave: int = Field(default=1000, ge=1, le=100_000)
    velocity: float = Field(default=50.0, gt=0, le=100_000, description="jobs per second")
    poll_seconds: float = Field(default=5.0, ge=0.1, le=3600)
    growth_window_minutes: int = Field(default=10, ge=1, le=24 * 60)
    max_redrives_per_job: int = Field(default=3, ge=1, le=100)
    permanent_errors: list[Annotated[str, AfterValidator(_regex)]] = Field(
        default_factory=lambda: [
            r"invalid media",
            r"moov atom not found",
            r"unsupported (codec|format)",
        ]
    )


class ReadsConfig(_Strict):
    """How queue reads share the estate database (see services/read_gate.py)."""

    concurrency: int = Field(default=3, ge=1, le=64)
    fresh_seconds: float = Field(default=3.0, ge=0, le=300)


class HttpConfig(_Strict):
    """The HTTP server of ``queuebot serve``: a body over ``max_body_kb`` is refused (413)
    before it is read. Slack's requests are a few KB; the floor keeps room for them.
    ``readyz_fresh_seconds`` is how long ``/readyz`` reuses what it found of the queues'
    columns and privileges and of Slack (the databases are asked at every probe)."""

    max_body_kb: int = Field(default=256, ge=16, le=16 * 1024)
    readyz_fresh_seconds: float = Field(default=5.0, ge=1, le=300)


class SlackConfig(_Strict):
    """Posting to Slack: posts to one channel are spaced ``post_interval_seconds`` apart
    (Slack takes about one message per second per channel; 0 turns the spacing off and
    leaves only 429 Retry-After). ``posting_only``: the bot token alone, chosen on purpose:
    queuebot posts, and Slack can send it nothing back (no command, no click); without
    it a bot token with neither SLACK_SIGNING_SECRET nor SLACK_APP_TOKEN is refused."""

    post_interval_seconds: float = Field(default=1.0, ge=0, le=60)
    posting_only: bool = False


class DiscordConfig(_Strict):
    """Discord's app commands: registered to one guild (a server's id, they appear at
    once) when ``guild`` is set, otherwise globally (Discord may take up to an hour to
    show them everywhere)."""

    guild: Snowflake | None = None


class MetricsConfig(_Strict):
    """``GET /metrics``: the queue gauges are read from the estate at most once every
    ``refresh_seconds``, however often Prometheus scrapes (docs/metrics.md)."""

    refresh_seconds: float = Field(default=15.0, ge=1, le=3600)


class AccessConfig(_Strict):
    unknown_users: Literal["read-only", "deny"] = "read-only"


class RunbooksConfig(_Strict):
    dir: str | None = None


class FileConfig(_Strict):
    """Everything the TOML file may hold."""

    queue: QueueConfig | None = None
    queues: dict[str, QueueConfig] = Field(default_factory=dict)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    people: dict[str, PersonConfig] = Field(default_factory=dict)
    roles: dict[str, Role] = Field(default_factory=dict)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    redrive: RedriveConfig = Field(default_factory=RedriveConfig)
    reads: ReadsConfig = Field(default_factory=ReadsConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    runbooks: RunbooksConfig = Field(default_factory=RunbooksConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    incidents: IncidentsConfig = Field(default_factory=IncidentsConfig)
    housekeeping: HousekeepingConfig = Field(default_factory=HousekeepingConfig)

    @model_validator(mode="after")
    def _consistent(self) -> FileConfig:
        if self.queue is not None and self.queues:
            raise ValueError("use either [queue] or [queues.NAME], not both")
        for name in [*self.queues, *self.people, *self.channels]:
            if not _NAME.match(name):
                raise ValueError(
                    f"name {name!r} must be lower-case letters, digits, '-' or '_' "
                    "(starting with a letter, at most 32 characters)"
                )
        for platform in ("slack", "discord"):
            seen: dict[str, str] = {}
            for person, cfg in self.people.items():
                account = getattr(cfg, platform)
                if account is None:
                    continue
                if account in seen:
                    raise ValueError(
                        f"people.{person}.{platform} = {account!r} is already "
                        f"people.{seen[account]}.{platform}; one account belongs to one person"
                    )
                seen[account] = person
        self._check_routes()
        return self

    def _check_routes(self) -> None:
        """Every route names channels of [channels] and, if any, a configured queue."""
        queues = self.queue_map()
        names = {route.name for route in self.alerts.routes}
        for index, route in enumerate(self.alerts.routes):
            where = f"alerts.routes.{index} ({route.name})"
            for channel in route.channels:
                if channel not in self.channels:
                    known = ", ".join(sorted(self.channels)) or "none yet"
                    raise ValueError(
                        f"{where}: channel {channel!r} is not in [channels] (known: {known}); "
                        f"add [channels.{channel}] with its slack or discord id"
                    )
            if route.queue is not None and route.queue not in queues:
                raise ValueError(
                    f"{where}: queue {route.queue!r} is not configured "
                    f"(configured: {', '.join(queues)})"
                )
        for audience, channels in self.incidents.audiences.items():
            for channel in channels:
                if channel not in self.channels:
                    raise ValueError(
                        f"incidents.audiences.{audience}: channel {channel!r} is not in "
                        f"[channels]; add [channels.{channel}] with its slack or discord id"
                    )
        synthetic = self.incidents.synthetic_job
        if synthetic is not None and synthetic.queue not in queues:
            raise ValueError(
                f"incidents.synthetic_job.queue {synthetic.queue!r} is not configured "
                f"(configured: {', '.join(queues)})"
            )
        if len(names) != len(self.alerts.routes):
            raise ValueError("alerts.routes: two routes have the same name; names are unique")

    def queue_map(self) -> dict[str, QueueConfig]:
        """Configured queues by name, in file order; the first is the default."""
        if self.queue is not None:
            return {"main": self.queue}
        if self.queues:
            return dict(self.queues)
        return default_queues()


def default_queues() -> dict[str, QueueConfig]:
    """With no queue configured, the demo estate's two queues (the embedded default)."""
    return {
        "clips": QueueConfig(profile="message_job"),
        "workers": QueueConfig(profile="worker_queue"),
    }


class EnvSettings(BaseSettings):
    """The fixed environment variables (README, Configuration)."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=True, frozen=True)

    config_path: str | None = Field(default=None, validation_alias="QUEUEBOT_CONFIG")
    database_url: SecretStr = Field(
        default=SecretStr(DEFAULT_DATABASE_URL), validation_alias="QUEUEBOT_DATABASE_URL"
    )
    queue_database_url: SecretStr | None = Field(
        default=None, validation_alias="QUEUEBOT_QUEUE_DATABASE_URL"
    )
    slack_bot_token: SecretStr | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias="SLACK_SIGNING_SECRET"
    )
    slack_app_token: SecretStr | None = Field(default=None, validation_alias="SLACK_APP_TOKEN")
    slack_api_base_url: str = Field(
        default="https://slack.com/api/", validation_alias="SLACK_API_BASE_URL"
    )
    discord_bot_token: SecretStr | None = Field(default=None, validation_alias="DISCORD_BOT_TOKEN")
    discord_api_base_url: str = Field(
        default="https://discord.com/api/v10", validation_alias="DISCORD_API_BASE_URL"
    )
    alert_token: SecretStr | None = Field(default=None, validation_alias="QUEUEBOT_ALERT_TOKEN")
    # The key of the audit trail's HMAC chain. Only here: the database never holds it.
    audit_key: SecretStr | None = Field(default=None, validation_alias="QUEUEBOT_AUDIT_KEY")
    # Told of each retry-exhausted row before housekeeping retires it (optional).
    housekeep_webhook_url: SecretStr | None = Field(
        default=None, validation_alias="QUEUEBOT_HOUSEKEEP_WEBHOOK_URL"
    )
    claim_stale_seconds: float | None = Field(
        default=None,
        ge=MIN_CLAIM_STALE_SECONDS,
        le=3600,
        validation_alias="QUEUEBOT_CLAIM_STALE_SECONDS",
        description="how long a delivery's claim may go unrefreshed before its owner is "
        "taken for dead and a redelivery takes it over (default: services/ledger.py STALE)",
    )

    _empty: frozenset[str] = PrivateAttr(default=frozenset())

    @model_validator(mode="wrap")
    @classmethod
    def _blank_is_unset(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> EnvSettings:
        empty: frozenset[str] = frozenset()
        if isinstance(data, dict):
            empty = frozenset(
                name
                for name, value in data.items()
                if isinstance(name, str)
                and name.startswith(BLANK_IS_UNSET)
                and isinstance(value, str)
                and not value.strip()
            )
            data = {name: value for name, value in data.items() if name not in empty}
        settings: EnvSettings = handler(data)
        settings._empty = empty
        return settings

    @property
    def empty(self) -> frozenset[str]:
        """The chat platform variables and QUEUEBOT_ALERT_TOKEN where they were set to
        nothing (and so count as unset)."""
        return self._empty

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # An explicit mapping (tests, the demo) is the whole environment: nothing from
        # the process leaks in. Otherwise the process environment, and no .env files.
        if _EXPLICIT_ENVIRON.get():
            return (init_settings,)
        return (init_settings, env_settings)

    @field_validator("slack_api_base_url", "discord_api_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("expected an http(s) URL")
        return value

    @field_validator("audit_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        key = value.get_secret_value()
        if key != key.strip():  # a stray newline would make it another key elsewhere
            raise ValueError("must not begin or end with white space")
        if len(key) < AUDIT_KEY_MIN_LENGTH:
            raise ValueError(
                f"must be at least {AUDIT_KEY_MIN_LENGTH} characters; make one with "
                "`openssl rand -hex 32`"
            )
        return value

    @field_validator("alert_token")
    @classmethod
    def _a_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        token = value.get_secret_value()
        if token != token.strip():  # Alertmanager trims its credentials_file: no match
            raise ValueError("must not begin or end with white space")
        if len(token) < ALERT_TOKEN_MIN_LENGTH:
            raise ValueError(
                f"must be at least {ALERT_TOKEN_MIN_LENGTH} characters (a shorter one is no "
                "secret); make one with `openssl rand -hex 16`, or leave it unset"
            )
        return value

    @property
    def state_url(self) -> str:
        return self.database_url.get_secret_value()

    @property
    def estate_url(self) -> str:
        url = self.queue_database_url or self.database_url
        return url.get_secret_value()


@dataclass(frozen=True)
class Config:
    """Validated configuration: the file's settings and the environment's."""

    file: FileConfig
    env: EnvSettings
    source: Path | None

    @property
    def queues(self) -> dict[str, QueueConfig]:
        return self.file.queue_map()


def _secret_names() -> frozenset[str]:
    """The environment variables holding secrets: an error about one never shows its value."""
    return frozenset(
        str(info.validation_alias)
        for info in EnvSettings.model_fields.values()
        if "SecretStr" in str(info.annotation)
    )


def _format_errors(where: str, exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    lines = []
    secrets = _secret_names()
    for err in exc.errors(include_url=False):
        key = ".".join(str(part) for part in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            near = did_you_mean(model, err["loc"]) if model is not None else None
            if near is not None:
                msg += f"; did you mean {near}?"
        msg = msg.removeprefix("Value error, ")
        value = err.get("input")
        hidden = isinstance(value, dict) or (err["loc"] and str(err["loc"][0]) in secrets)
        shown = "" if hidden else f" = {value!r}"
        lines.append(f"{where}: {key}{shown}: {msg}")
    return "\n".join(lines)


# Settings an earlier version read and this one no longer does: a file that still has them
# loads, with a warning that says what to do instead.
REMOVED: dict[tuple[str, str], str] = {
    ("slack", "answer_workers"): (
        "answers run in the serving process now; run more `queuebot serve` replicas "
        "behind the load balancer to serve more"
    ),
}


def parse_file_config(data: Mapping[str, Any], *, where: str) -> FileConfig:
    data = dict(data)
    for (section, key), instead in REMOVED.items():
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            log.warning(
                "%s: [%s] %s is no longer read and is ignored: %s", where, section, key, instead
            )
            rest = {k: v for k, v in table.items() if k != key}
            if rest:
                data[section] = rest
            else:
                del data[section]
    try:
        file = FileConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(where, exc, FileConfig)) from exc
    sections = {"queue": file.queue} if file.queue is not None else {}
    sections.update({f"queues.{name}": queue for name, queue in file.queues.items()})
    for section, queue in sections.items():
        queue._file, queue._section = where, section
    return file


def load_config(
    path: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> Config:
    """Load and validate the configuration; raise ConfigError naming what is wrong.

    ``path`` (from ``--config``) wins over ``QUEUEBOT_CONFIG``; with neither, the file
    ``./queuebot.toml`` is read when it exists and defaults are used when it does not.
    """
    try:
        # pydantic-settings reads the process environment; an explicit mapping (tests, the
        # demo) is validated on its own so nothing leaks in from the process.
        if environ is None:
            env = EnvSettings()
        else:
            token = _EXPLICIT_ENVIRON.set(True)
            try:
                env = EnvSettings(**dict(environ))  # type: ignore[arg-type]
            finally:
                _EXPLICIT_ENVIRON.reset(token)
    except ValidationError as exc:
        raise ConfigError(_format_errors("environment", exc)) from exc

    explicit = path if path is not None else env.config_path
    source: Path | None = Path(explicit) if explicit else None
    if source is None and DEFAULT_CONFIG_PATH.exists():
        source = DEFAULT_CONFIG_PATH
    if source is None:
        return Config(file=FileConfig(), env=env, source=None)
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {source}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    return Config(file=parse_file_config(data, where=str(source)), env=env, source=source)
