"""Which channels carry each audience of a runbook. An audience's channels are those
``[incidents] audiences`` maps it to, else the channel named like it (``[channels.actors]``
for the actors); a channel carries it only where ``[channels.NAME]`` gives it an id on a
platform (Slack or Discord). An audience none of whose channels does is told nowhere: a
declaration of its runbook is refused, and so is `/incident notify` to it, and
`config check` reports it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.config import ChannelConfig, FileConfig
from services.config.incidents import IncidentsConfig
from services.errors import ConfigError
from services.runbooks import Runbook


class Shelf(Protocol):
    """The runbooks loaded (``RunbookLibrary``)."""

    def all(self) -> Sequence[Runbook]: ...


def reachable_channels(channels: Mapping[str, ChannelConfig]) -> frozenset[str]:
    """The ``[channels]`` names that have an id on at least one platform."""
    return frozenset(
        name
        for name, found in channels.items()
        if found.slack is not None or found.discord is not None
    )


@dataclass(frozen=True)
class Reach:
    config: IncidentsConfig
    channels: frozenset[str]  # [channels] names with an id on some platform

    def of(self, audience: str) -> list[str]:
        """The audience's channels that some platform carries."""
        return [c for c in self.config.channels_of(audience) if c in self.channels]

    def how(self, audience: str) -> str:
        """How to give the audience a channel."""
        named = self.config.channels_of(audience)
        if audience in self.config.audiences:
            return (
                f"[incidents] audiences maps the {audience} to {', '.join(named)}: give "
                + " or ".join(f"[channels.{c}]" for c in named)
                + " a slack or discord id"
            )
        return (
            f"add [channels.{audience}] with its slack or discord id, or map the audience to "
            f'a channel that has one: [incidents] audiences = {{ {audience} = ["CHANNEL"] }}'
        )

    def missing(self, runbook: Runbook) -> list[str]:
        """The runbook's audiences no channel carries."""
        return [c.audience for c in runbook.communications if not self.of(c.audience)]

    def refuse_declaring(self, runbook: Runbook) -> None:
        missing = self.missing(runbook)
        if missing:
            raise ConfigError(
                f"{runbook.scenario_id} cannot be declared: its runbook tells "
                f"{_and(missing)}, and no channel carries them on any platform, so nobody could "
                f"be told. {_first_up('; '.join(self.how(a) for a in missing))}; then "
                "declare again"
            )

    def refuse_telling(self, audience: str, due: str) -> list[str]:
        """The audience's channels; none: refused, and its communication stays pending."""
        channels = self.of(audience)
        if not channels:
            raise ConfigError(
                f"nobody was told: no channel carries the {audience} on any platform; "
                f"{self.how(audience)}. Their communication stays pending (due {due})"
            )
        return channels


def audience_problems(runbooks: Shelf | None, config: FileConfig) -> list[str]:
    """For `config check`: each runbook audience no channel carries on any platform."""
    if runbooks is None:
        return []
    reach = Reach(config.incidents, reachable_channels(config.channels))
    problems: list[str] = []
    for runbook in runbooks.all():
        for audience in reach.missing(runbook):
            problems.append(
                f"runbook {runbook.scenario_id} tells the {audience}, and no channel carries "
                f"them on any platform (its declaration would be refused): {reach.how(audience)}"
            )
    return problems


def _first_up(text: str) -> str:
    return text[:1].upper() + text[1:]


def _and(names: Collection[str]) -> str:
    words = [f"the {n}" for n in names]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
