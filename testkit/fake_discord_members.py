"""The fake Discord's guild members (testkit/fake_discord.py): the roles each member holds,
as an interaction carries them (``member.roles``) and as ``GET /guilds/{guild}/members``
lists them, paged as Discord pages them (``limit``, ``after``: members by user id, after
that id), and the gateway's GUILD_MEMBER_UPDATE when a member's roles change.

A test sets ``member_roles[user] = [role ids]`` before the interaction it delivers, or
calls ``member_update(user, roles)`` to change them and tell the bot over the gateway."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

MAX_PAGE = 1000  # Discord's most members per page of GET /guilds/{guild}/members


def member_json(user: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    """A guild member as Discord sends it: the user, their role ids, when they joined."""
    return {
        "user": user,
        "roles": list(roles),
        "nick": None,
        "avatar": None,
        "joined_at": "2026-01-01T00:00:00+00:00",
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
    }


class GuildMembers:
    """The members part of ``FakeDiscord``; it supplies the guild, the lock, the loop and
    the gateway's dispatch."""

    guild: str
    _lock: threading.Lock
    _loop: asyncio.AbstractEventLoop

    def __init__(self) -> None:
        self.member_roles: dict[str, list[str]] = {}  # user id -> the role ids they hold

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def _user_json(self, user: str) -> dict[str, Any]:
        raise NotImplementedError

    def roles_of(self, user: str) -> list[str]:
        """What an interaction of ``user`` carries as ``member.roles``."""
        with self._lock:
            return list(self.member_roles.get(user, []))

    def member_update(self, user: str, roles: list[str]) -> None:
        """``user`` now holds ``roles``: kept, and GUILD_MEMBER_UPDATE sent over the
        gateway as Discord sends it."""
        with self._lock:
            self.member_roles[user] = list(roles)
        data = {**member_json(self._user_json(user), roles), "guild_id": self.guild}
        asyncio.run_coroutine_threadsafe(
            self._dispatch("GUILD_MEMBER_UPDATE", data), self._loop
        ).result(timeout=10)

    def members_page(self, guild: str, query: dict[str, Any]) -> tuple[Any, int]:
        """``GET /guilds/{guild}/members``: up to ``limit`` (1-1000, default 1) members
        whose user id is above ``after`` (default 0), by user id."""
        if guild != self.guild:
            return {"message": "Unknown Guild", "code": 10004}, 404
        try:
            limit = int(query.get("limit", 1))
            after = int(query.get("after", 0))
        except ValueError:
            return {"message": "Invalid Form Body", "code": 50035}, 400
        if not 1 <= limit <= MAX_PAGE:
            return {"message": "Invalid Form Body", "code": 50035}, 400
        with self._lock:
            held = sorted(self.member_roles.items(), key=lambda item: int(item[0]))
        page = [(user, roles) for user, roles in held if int(user) > after][:limit]
        return [member_json(self._user_json(user), roles) for user, roles in page], 200
