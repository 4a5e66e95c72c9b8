"""Where a group's members are read: a Slack user group (``usergroups.users.list``) or a
Discord role (the guild's members holding it). A ``Reader`` is the platform's edge, given
by the chat adapter's wiring (bot/slack, bot/discord); services never call a platform
themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

SourceKind = Literal["slack_usergroup", "discord_role"]
PLATFORM: dict[SourceKind, str] = {"slack_usergroup": "slack", "discord_role": "discord"}


@dataclass(frozen=True)
class Source:
    """One group on one platform, by its id."""

    kind: SourceKind
    id: str

    @property
    def platform(self) -> str:
        return PLATFORM[self.kind]

    def label(self) -> str:
        """The source as a person finds it in the config and in the platform."""
        if self.kind == "slack_usergroup":
            return f"Slack user group {self.id}"
        return f"Discord role {self.id}"

    def mention(self) -> str:
        """How a post reaches the group's members without reaching the whole channel."""
        if self.kind == "slack_usergroup":
            return f"<!subteam^{self.id}>"
        return f"<@&{self.id}>"


class Reader(Protocol):
    """Reads a group's members (their platform account ids). Raises any exception when
    the platform cannot say; ``Membership`` turns that into a stale read, then a refusal."""

    async def members(self, source: Source) -> frozenset[str]: ...
