"""The fixed environment variables: secrets (tokens, the signing secret, database URLs that
may carry passwords) come only from here (or from the files their NAME_FILE variables
name: ``secret_files.py``), are held as ``SecretStr`` and never logged."""

from __future__ import annotations

import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

# As people write it (and messages show it); the engine gives it the async driver.
DEFAULT_DATABASE_URL = "sqlite:///./queuebot.db"
DEFAULT_CONFIG_PATH = Path("queuebot.toml")
EXPLICIT_ENVIRON: ContextVar[bool] = ContextVar("queuebot_explicit_environ", default=False)
AUDIT_KEY_MIN_LENGTH = 32
# The bearer token Alertmanager sends: shorter than this is no secret (a guess, a word, a
# placeholder left in a template). `openssl rand -hex 16` makes one of 32 characters.
ALERT_TOKEN_MIN_LENGTH = 16
# A delivery's claim is refreshed every 2 s while its work runs (services/ledger/__init__.py
# HEARTBEAT); one unrefreshed for less than two and a half beats may belong to a live owner.
MIN_CLAIM_STALE_SECONDS = 5.0

# Chat platform variables and the alerts token: one set to nothing (or blanks) counts as
# not set. A deploy template often writes `SLACK_SIGNING_SECRET=` or
# `QUEUEBOT_ALERT_TOKEN=` for a value it did not fill in.
BLANK_IS_UNSET = ("SLACK_", "DISCORD_", "QUEUEBOT_ALERT_TOKEN")


class EnvSettings(BaseSettings):
    """The fixed environment variables (docs/configuration.md)."""

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
        "taken for dead and a redelivery takes it over (default: the ledger's STALE)",
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
        # load_config (services/config/load.py, load_env) passes every variable itself,
        # each secret read from its NAME_FILE where that is set: the mapping it passes is
        # the whole environment, and no .env file is read.
        if EXPLICIT_ENVIRON.get():
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


def secret_names() -> frozenset[str]:
    """The environment variables holding secrets: an error about one never shows its value."""
    return frozenset(
        str(info.validation_alias)
        for info in EnvSettings.model_fields.values()
        if "SecretStr" in str(info.annotation)
    )


def variable_names() -> frozenset[str]:
    """Every environment variable the settings read."""
    return frozenset(str(info.validation_alias) for info in EnvSettings.model_fields.values())
