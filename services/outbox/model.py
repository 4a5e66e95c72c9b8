"""What the outbox holds and hands to a deliverer: an ``Item`` (its kind, subject and
payload, and how many times it was claimed), the priorities, the lane of a channel, and
``PostedNowhere``, a deliverer's word that its item has nowhere to go."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

BULK, NORMAL, URGENT = 0, 1, 2  # priorities: higher goes first


@dataclass(frozen=True)
class Item:
    id: int
    kind: str
    subject: str
    payload: dict[str, Any]
    attempts: int


Deliver = Callable[[Item], Awaitable[None]]


NO_PLATFORM = (
    "no chat platform is configured (neither SLACK_BOT_TOKEN nor DISCORD_BOT_TOKEN is set)"
)
NOT_POSTED = f"not posted: {NO_PLATFORM}"  # the record of a post that went nowhere


class PostedNowhere(Exception):
    """A deliverer's word that its item has nowhere to go (no chat platform is
    configured): the item is closed, never retried, with the reason kept as its
    ``last_error``, instead of being recorded as posted."""


def channel_lane(channel: str) -> str:
    """The lane of posts to a channel named in the configuration (``[channels.NAME]``)."""
    return f"channel:{channel}"[:160]
