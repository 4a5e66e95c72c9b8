"""The ``[incidents]`` part of the TOML file: which channels carry each audience's
communications, and when the incident lead is reminded of a pending one."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from services.alert_settings import Name

OPERATORS = "operators"  # the audience (and channel) escalations also go to


class IncidentsConfig(BaseModel):
    """``audiences``: audience -> channel names (default: the channel named like the
    audience, e.g. [channels.actors]); ``remind_at``: fractions of a communication's
    window at which the lead is reminded while it is pending (default at half and at
    80%)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audiences: dict[Name, Annotated[list[Name], Field(min_length=1, max_length=10)]] = Field(
        default_factory=dict
    )
    remind_at: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(max_length=5)] = Field(
        default_factory=lambda: [0.5, 0.8]
    )

    def channels_of(self, audience: str) -> list[str]:
        return list(self.audiences.get(audience, [audience]))
