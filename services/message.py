"""Platform-neutral message content. Every adapter renders it its own way (Block Kit,
discord.py embeds and views, plain text); nothing here knows a platform."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Text:
    text: str
    mono: bool = False


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Fields:
    """Label/value pairs shown side by side."""

    items: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str | None = None
    numeric: tuple[int, ...] = ()  # indexes of right-aligned columns


@dataclass(frozen=True)
class Button:
    """``action_id`` is stable and carries its state, e.g. ``cr:approve:17``."""

    action_id: str
    label: str
    style: Literal["primary", "danger"] | None = None
    command: str | None = None  # the typed equivalent, for surfaces without buttons


@dataclass(frozen=True)
class Actions:
    buttons: tuple[Button, ...]


Block = Text | Heading | Fields | Table | Actions


@dataclass(frozen=True)
class Message:
    """``summary`` is the one-line text used for notifications and fallbacks."""

    summary: str
    blocks: tuple[Block, ...] = field(default_factory=tuple)
