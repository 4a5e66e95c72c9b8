"""The notifier port: how alerts, incidents and plans post to chat.

Channels are named by configuration (``[channels.alerts]``); each platform's notifier
resolves a name to its own channel id. A post returns a ``MessageRef`` that later
updates and thread replies use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.message import Message


@dataclass(frozen=True)
class MessageRef:
    """Where a posted message lives: platform, channel id and the platform's message id."""

    platform: str
    channel: str
    message_id: str
    thread_id: str | None = None


class Notifier(Protocol):
    async def post(
        self, *, channel: str, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        """Post to a named channel (or into ``thread``); one ref per platform reached."""
        ...

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        """Replace the content of an earlier message."""
        ...


class FanoutNotifier:
    """Posts through several platform notifiers; a thread ref goes to its own platform."""

    def __init__(self, notifiers: Sequence[tuple[str, Notifier]]) -> None:
        self._notifiers = list(notifiers)

    async def post(
        self, *, channel: str, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        refs: list[MessageRef] = []
        for platform, notifier in self._notifiers:
            if thread is not None and thread.platform != platform:
                continue
            refs.extend(await notifier.post(channel=channel, message=message, thread=thread))
        return refs

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        for platform, notifier in self._notifiers:
            if platform == ref.platform:
                await notifier.update(ref=ref, message=message)
