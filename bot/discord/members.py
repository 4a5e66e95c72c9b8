"""Discord roles as a source of roles, rotas and teams.

A command or a click carries its member's roles (``interaction.member.roles``): those are
fresh and need no read (bot/discord/interactions.py). To say who holds a role (a rota's
holders, who may approve) queuebot reads the guild's members over REST, which needs the
privileged Server Members intent, and reads again when the gateway says a member
changed (GUILD_MEMBER_ADD, _UPDATE, _REMOVE)."""

from __future__ import annotations

import logging

import discord

from services.access import Membership, Source
from services.errors import Unavailable

log = logging.getLogger("queuebot.discord")

PAGE = 1000  # Discord's most members per page
MEMBER_EVENTS = frozenset({"GUILD_MEMBER_ADD", "GUILD_MEMBER_UPDATE", "GUILD_MEMBER_REMOVE"})


class DiscordRoles:
    """Reads which members of the guild hold a role (their user ids)."""

    def __init__(self, client: discord.Client, guild: str) -> None:
        self.client = client
        self.guild = guild

    async def members(self, source: Source) -> frozenset[str]:
        holders: set[str] = set()
        after: int | None = None
        try:
            while True:
                page = await self.client.http.get_members(int(self.guild), PAGE, after)
                for member in page:
                    if source.id in (str(r) for r in member.get("roles", [])):
                        holders.add(str(member["user"]["id"]))
                if len(page) < PAGE:
                    return frozenset(holders)
                after = int(page[-1]["user"]["id"])
        except discord.Forbidden as exc:
            raise Unavailable(
                f"Discord refused the guild's members (403 {exc.text[:80]}): enable the "
                "Server Members intent on the application's Bot page"
            ) from exc
        except discord.HTTPException as exc:
            raise Unavailable(f"Discord answered {exc.status}: {exc.text[:120]}") from exc


def member_changed(event: str | None, membership: Membership) -> bool:
    """A gateway event about a member (``event``: its type, GUILD_MEMBER_UPDATE): every
    Discord role is read again at its next use (the event says what the member holds now,
    not what they held)."""
    if event not in MEMBER_EVENTS:
        return False
    membership.forget_platform("discord")
    return True
