"""What the outbox holds and hands to a poster: an ``Item`` (its kind, subject and
payload, and how many times it was claimed), the priorities, the lane of a channel, where
a post must be shown (``destination``) and which of those places a relay reaches
(``Reach``), and ``PostedNowhere``, a poster's word that its item has nowhere to go."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

BULK, NORMAL, URGENT = 0, 1, 2  # priorities: higher goes first


@dataclass(frozen=True)
class Item:
    id: int
    kind: str
    subject: str
    payload: dict[str, Any]
    attempts: int


Poster = Callable[[Item], Awaitable[None]]


NO_PLATFORM = (
    "no chat platform is configured (neither SLACK_BOT_TOKEN nor DISCORD_BOT_TOKEN is set)"
)
NOT_POSTED = f"not posted: {NO_PLATFORM}"  # the record of a post that went nowhere


class PostedNowhere(Exception):
    """A poster's word that its item has nowhere to go (no chat platform is
    configured): the item is closed, never retried, with the reason kept as its
    ``last_error``, instead of being recorded as posted."""


def channel_lane(channel: str) -> str:
    """The lane of posts to a channel named in the configuration (``[channels.NAME]``)."""
    return f"channel:{channel}"[:160]


def destination(platform: str, channel: str) -> str:
    """The one place a post must be shown: a channel of one platform (where a command was
    typed); for the console, ``console:SESSION``, the session that asked."""
    return f"{platform}:{channel}"[:160]


@dataclass(frozen=True)
class Reach:
    """The destinations a process's relay delivers to. A post without a destination (an
    alert to a channel named in the configuration) goes through any relay, by that
    process's own notifier. A post with one is claimed only by a relay that reaches it:
    one of ``platforms`` (every channel of Slack or Discord, which serve posts to) or
    exactly one of ``places`` (a console session, which only its own process can print
    in); one no running process reaches waits, undelivered and untried, for one that
    does. ``everywhere``: every destination (a test or benchmark doing all in one process).
    """

    platforms: frozenset[str] = field(default_factory=frozenset)
    places: frozenset[str] = field(default_factory=frozenset)
    everywhere: bool = False

    def covers(self, where: str | None) -> bool:
        if where is None or self.everywhere or where in self.places:
            return True
        return where.split(":", 1)[0] in self.platforms


EVERYWHERE = Reach(everywhere=True)


@dataclass(frozen=True)
class Unshown:
    """A subject's posts nobody has been shown: ``waiting``, undelivered (since when, for
    which destination, and the error of the oldest's last attempt when one failed), and
    ``closed`` as posted nowhere (and why)."""

    waiting: int = 0
    since: datetime | None = None
    where: str | None = None
    error: str | None = None
    closed: int = 0
    why: str | None = None
