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


@dataclass(frozen=True)
class ChannelRef:
    """A channel on one platform by its own id (where a command was typed)."""

    platform: str
    channel: str


class Notifier(Protocol):
    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        """Post to a channel named in the config on every platform that has it, to one
        platform's channel (``ChannelRef``), or into ``thread``; one ref per post."""
        ...

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        """Replace the content of an earlier message."""
        ...


class FanoutNotifier:
    """Posts through several platform notifiers; a thread ref goes to its own platform."""

    def __init__(self, notifiers: Sequence[tuple[str, Notifier]]) -> None:
        self._notifiers = list(notifiers)

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms it posts to ("slack", "discord")."""
        return frozenset(platform for platform, _ in self._notifiers)

    def on(self, platform: str) -> Notifier | None:
        """The notifier of ``platform``, if it posts there."""
        return next((n for p, n in self._notifiers if p == platform), None)

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        refs: list[MessageRef] = []
        for platform, notifier in self._notifiers:
            if thread is not None and thread.platform != platform:
                continue
            if isinstance(channel, ChannelRef) and channel.platform != platform:
                continue
            refs.extend(await notifier.post(channel=channel, message=message, thread=thread))
        return refs

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        for platform, notifier in self._notifiers:
            if platform == ref.platform:
                await notifier.update(ref=ref, message=message)

    async def close(self) -> None:
        """Close what each platform's notifier holds open (connections, a login), every
        one of them even when one fails (the first failure is raised after)."""
        failed: list[Exception] = []
        for _, notifier in self._notifiers:
            close = getattr(notifier, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception as exc:  # the others are still closed
                    failed.append(exc)
        if failed:
            raise failed[0]
