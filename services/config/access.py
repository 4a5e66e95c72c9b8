"""Who may act, from the groups teams already keep: ``[rotas]`` (a Slack user group, a
Discord role or a built-in weekly schedule), role grants under ``[roles.ROLE]`` and
owner teams under ``[teams.NAME]`` (docs/access.md). Each model is strict; names that
point elsewhere (people, rotas, teams) are checked by ``FileConfig``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator

from services.config.sections import Snowflake, Strict, pattern

_SLACK_GROUP = re.compile(r"^S[A-Z0-9]{2,20}\Z")
SlackGroupId = Annotated[str, pattern(_SLACK_GROUP, "a Slack user group id such as S0123ABCD")]
_EVERY = re.compile(r"^([1-9][0-9]{0,3})([hdw])\Z")
_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
# a rota's name as runbooks and commands write it: "rota:prod-ops" or the authority's
# own words ("operations duty officer on shift"); compared without regard to case
_ROTA_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9 :_.-]{0,79}\Z")


def every(value: str) -> timedelta:
    """``"7d"`` -> seven days: a number (1-9999) and h, d or w."""
    found = _EVERY.match(value.strip())
    if found is None:
        raise ValueError('expected a number and h, d or w, such as "7d" (a week) or "12h"')
    return int(found.group(1)) * _UNIT[found.group(2)]


def rota_key(name: str) -> str:
    """A rota's or authority's name as compared: case and runs of spaces do not matter."""
    return " ".join(name.split()).casefold()


def check_rota_name(name: str) -> str:
    if not _ROTA_NAME.match(name):
        raise ValueError(
            f'rota {name!r}: a name such as "rota:prod-ops" (letters, digits, spaces, '
            "':', '.', '_' or '-', starting with a letter, at most 80 characters)"
        )
    return name


RotaName = Annotated[str, AfterValidator(check_rota_name)]


class ScheduleConfig(Strict):
    """A built-in rotation: from ``start``, each of ``people`` in turn holds the rota for
    ``every`` (the one on shift is the primary, the next the secondary)."""

    start: datetime
    every: timedelta
    people: list[str] = Field(min_length=1, max_length=100)

    @field_validator("start")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError(
                'give the time with its zone, such as "2026-12-07T09:00:00Z" (a schedule '
                "without one would hand over at a different hour on every host)"
            )
        return value

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, value: Any) -> Any:
        return every(value) if isinstance(value, str) else value

    @field_validator("people")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a person is listed twice; each holds one shift in turn")
        return value


class RotaConfig(Strict):
    """One rota: exactly one source of who holds it."""

    slack_usergroup: SlackGroupId | None = None
    discord_role: Snowflake | None = None
    schedule: ScheduleConfig | None = None

    @model_validator(mode="after")
    def _one_source(self) -> RotaConfig:
        given = [s for s in ("slack_usergroup", "discord_role", "schedule") if getattr(self, s)]
        if len(given) != 1:
            raise ValueError(
                'give exactly one source of who holds the rota: slack_usergroup = "S…" '
                '(a Slack user group), discord_role = "<role id>" (a Discord role) or '
                'schedule = { start = "2026-12-07T09:00:00Z", every = "7d", people = [...] }'
                + (f"; this one gives {' and '.join(given)}" if given else "")
            )
        return self


class GroupsConfig(Strict):
    """Who belongs, from any of four sources at once: people by name, Slack user groups,
    Discord roles and rotas (their current holders). Used by ``[roles.ROLE]`` and by
    ``[teams.NAME]``."""

    people: list[str] = Field(default_factory=list)
    slack_usergroups: list[SlackGroupId] = Field(default_factory=list)
    discord_roles: list[Snowflake] = Field(default_factory=list)
    rotas: list[RotaName] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_empty(self) -> GroupsConfig:
        if not (self.people or self.slack_usergroups or self.discord_roles or self.rotas):
            raise ValueError(
                "name at least one of people, slack_usergroups, discord_roles or rotas"
            )
        return self
