"""The sections of queuebot.toml below the top level: queues, channels, people, roles,
approval, redrive, reads, http, slack, discord, metrics, access and runbooks. Each model
is strict: an unknown key or a bad value is refused with the key, the value and what was
expected."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from services.identifiers import validate_identifier

Role = Literal["viewer", "operator", "approver", "duty-officer"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "approver", "duty-officer")
# The queue profiles queuebot ships, by name, in the one place they are listed: the
# configuration sits below the estate, so the list lives here; each profile's package
# names itself with one of them, and ``shipped_profiles()`` (services/estate/registry.py)
# checks that the profiles it ships are exactly these.
ProfileName = Literal["worker_queue", "message_job"]
PROFILE_NAMES: tuple[ProfileName, ...] = get_args(ProfileName)
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
# What a redriven job whose row left the queue's table means: it succeeded (the team's
# workers delete only jobs that succeeded), or its outcome is unknown (they may delete
# failed ones too). Unset, the profile's own fact holds (services/estate/deleted_jobs.py).
DeletedJobsName = Literal["succeeded", "unknown"]
DELETED_JOBS_NAMES: tuple[DeletedJobsName, ...] = ("succeeded", "unknown")


_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,20}\Z")
_SLACK_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,20}\Z")
_SNOWFLAKE = re.compile(r"^[0-9]{15,21}\Z")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")


def pattern(regex: re.Pattern[str], expected: str) -> Any:
    def check(value: str) -> str:
        if not regex.match(value):
            raise ValueError(f"expected {expected}")
        return value

    return AfterValidator(check)


SlackUserId = Annotated[str, pattern(_SLACK_USER, "a Slack user id such as U0ALICE")]
SlackChannelId = Annotated[str, pattern(_SLACK_CHANNEL, "a Slack channel id such as C0ALERTS")]
Snowflake = Annotated[str, pattern(_SNOWFLAKE, "a Discord id (15-21 digits)")]
Identifier = Annotated[str, AfterValidator(validate_identifier)]
# A preset's name is checked against the profiles registered when the estate is built (a
# new preset is a package under services/estate/ and needs nothing here); this only keeps
# the value a plain name.
PresetName = Annotated[
    str,
    pattern(re.compile(r"^[a-z][a-z0-9_-]{0,39}\Z"), "a preset name such as river"),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChannelConfig(Strict):
    slack: SlackChannelId | None = None
    discord: Snowflake | None = None


class PersonConfig(Strict):
    slack: SlackUserId | None = None
    discord: Snowflake | None = None
    roles: list[Role] = Field(default_factory=list)


class QueueConfig(Strict):
    """One queue estate reached through a profile, with optional name overrides.

    ``table`` renames the main table (worker_queue); ``tables`` renames any table by its
    role (worker_queue: ``queue``; message_job: ``messages``, ``jobs``, ``events``,
    ``assets``); ``columns`` renames columns as ``"role.column" = "actual"``.
    ``statuses`` maps the team's own status values onto canonical states, e.g.
    ``dead = ["DLQ", "DEAD_LETTER"]``: they mean the same as the profile's own values of
    that state (docs/profiles.md says how writes treat them).
    ``deleted_jobs`` says what a redriven job whose row left the table means, where the
    system's workers decide whether they delete failed jobs (docs/presets.md).
    """

    profile: ProfileName | None = None
    # A preset: the tables of a job-queue system the team runs (services/estate/presets/),
    # checked against the registry when the estate is built; ``queue_name`` keeps to one
    # queue of the system's table, ``schema`` is where its tables live when not its default.
    preset: PresetName | None = None
    queue_name: str | None = Field(default=None, min_length=1, max_length=200)
    schema_name: Identifier | None = Field(default=None, alias="schema")
    table: Identifier | None = None
    tables: dict[str, Identifier] = Field(default_factory=dict)
    columns: dict[str, Identifier] = Field(default_factory=dict)
    statuses: dict[CanonicalStateName, list[str]] = Field(default_factory=dict)
    stuck_after_minutes: int = Field(default=15, ge=1, le=24 * 60)
    deleted_jobs: DeletedJobsName | None = None
    # the teams ([teams.NAME]) one of whom must approve every change to this queue
    owners: list[str] = Field(default_factory=list, max_length=20)

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

    @model_validator(mode="after")
    def _profile_or_preset(self) -> QueueConfig:
        if (self.profile is None) == (self.preset is None):
            raise ValueError(
                f"give either profile ({', '.join(PROFILE_NAMES)}: tables like queuebot's "
                "demo) or preset (the job-queue system the team runs, e.g. preset = "
                '"river"), exactly one of them'
            )
        if self.preset is None and (self.queue_name is not None or self.schema_name):
            raise ValueError("queue_name and schema are options of a preset; this queue has none")
        if self.schema_name is not None and "." in self.schema_name:
            raise ValueError(
                f"schema {self.schema_name!r} must be one name (letters, digits and '_'), "
                "without a '.'"
            )
        if self.queue_name is not None and self.queue_name != self.queue_name.strip():
            raise ValueError("queue_name must not begin or end with white space")
        return self

    @property
    def kind(self) -> str:
        """The registry's name of the profile this queue is read through."""
        name = self.preset or self.profile
        assert name is not None  # one of them is set (``_profile_or_preset``)
        return name

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

    @field_validator("deleted_jobs", mode="before")
    @classmethod
    def _deleted_jobs(cls, value: Any) -> Any:
        if value is None or value in DELETED_JOBS_NAMES:
            return value
        raise ValueError(
            'expected "succeeded" (this queue\'s workers delete a job only when it succeeded) '
            'or "unknown" (they may delete failed jobs too: a plan halts on a job that left '
            "the table)"
        )

    @field_validator("columns")
    @classmethod
    def _column_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[a-z_]+\.[a-z_]+\Z", key):
                raise ValueError(f"column override key {key!r} must look like 'role.column'")
        return value


class ApprovalConfig(Strict):
    """A change of more than ``large_change_rows`` rows needs ``large_change_approvals``
    approvers besides its requester, else one. A staged redrive counts by its sample (the
    rows it changes before anyone can halt it), every other change by all its rows
    (services/changes/quorum.py)."""

    expiry_minutes: int = Field(default=30, ge=1, le=24 * 60)
    large_change_rows: int = Field(default=100, ge=1)
    large_change_approvals: int = Field(default=2, ge=1, le=5)


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    return value


class RedriveConfig(Strict):
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


class ReadsConfig(Strict):
    """How queue reads share the estate database (see services/reads/gate.py)."""

    concurrency: int = Field(default=3, ge=1, le=64)
    fresh_seconds: float = Field(default=3.0, ge=0, le=300)


class HttpConfig(Strict):
    """The HTTP server of ``queuebot serve``: a body over ``max_body_kb`` is refused (413)
    before it is read. Slack's requests are a few KB; the floor keeps room for them.
    ``readyz_fresh_seconds`` is how long ``/readyz`` reuses what it found of the queues'
    columns and privileges and of Slack (the databases are asked at every probe).
    A client must send its request line and headers within ``header_timeout_seconds``
    and its body within ``body_timeout_seconds`` after them (each a total, not the time
    between two reads), or is answered 408 and closed; past ``max_connections`` open at
    once, a new connection is answered 503 and closed at once."""

    max_body_kb: int = Field(default=256, ge=16, le=16 * 1024)
    readyz_fresh_seconds: float = Field(default=5.0, ge=1, le=300)
    header_timeout_seconds: float = Field(default=10.0, ge=1, le=300)
    body_timeout_seconds: float = Field(default=10.0, ge=1, le=300)
    max_connections: int = Field(default=500, ge=16, le=100_000)


class SlackConfig(Strict):
    """Posting to Slack: posts to one channel are spaced ``post_interval_seconds`` apart
    (Slack takes about one message per second per channel; 0 turns the spacing off and
    leaves only 429 Retry-After). ``posting_only``: the bot token alone, chosen on purpose:
    queuebot posts, and Slack can send it nothing back (no command, no click); without
    it a bot token with neither SLACK_SIGNING_SECRET nor SLACK_APP_TOKEN is refused."""

    post_interval_seconds: float = Field(default=1.0, ge=0, le=60)
    posting_only: bool = False


class DiscordConfig(Strict):
    """Discord's app commands: registered to one guild (a server's id, they appear at
    once) when ``guild`` is set, otherwise globally (Discord may take up to an hour to
    show them everywhere). ``read_members``: see below."""

    guild: Snowflake | None = None
    # read the guild's members to say who holds a Discord role (a rota's holders, who may
    # approve): needs the privileged Server Members intent, which Discord refuses the
    # gateway without, so it is asked for only when this is set (docs/access.md)
    read_members: bool = False
    # the channel (its id) where queuebot keeps a status message: the board for anyone,
    # posted once and edited in place on every change (docs/commands.md, "The board")
    board_channel: Snowflake | None = None


class MetricsConfig(Strict):
    """``GET /metrics``: the queue gauges are read from the estate at most once every
    ``refresh_seconds``, however often Prometheus scrapes (docs/metrics.md)."""

    refresh_seconds: float = Field(default=15.0, ge=1, le=3600)


class AccessConfig(Strict):
    unknown_users: Literal["read-only", "deny"] = "read-only"


class RunbooksConfig(Strict):
    dir: str | None = None
