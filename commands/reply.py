"""What a handler returns: platform-neutral content plus how to deliver it."""

from __future__ import annotations

from dataclasses import dataclass

from services.message import Message


@dataclass(frozen=True)
class Reply:
    message: Message
    ephemeral: bool = True  # only the person who asked sees it, where the platform allows
    error: bool = False
