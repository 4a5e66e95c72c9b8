"""Platform-neutral message content. Every adapter renders it its own way (Block Kit,
discord.py embeds and views, plain text); nothing here knows a platform."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal


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


def message_json(message: Message) -> dict[str, Any]:
    """A message as JSON, for an outbox item that posts it later."""
    return {"summary": message.summary, "blocks": [_block_json(b) for b in message.blocks]}


def _block_json(block: Block) -> dict[str, Any]:
    data = asdict(block)
    data["type"] = type(block).__name__
    return data


def message_from_json(data: dict[str, Any]) -> Message:
    blocks: list[Block] = []
    for raw in data.get("blocks", []):
        item = dict(raw)
        kind = item.pop("type")
        if kind == "Text":
            blocks.append(Text(**item))
        elif kind == "Heading":
            blocks.append(Heading(**item))
        elif kind == "Fields":
            blocks.append(Fields(tuple((str(k), str(v)) for k, v in item["items"])))
        elif kind == "Table":
            blocks.append(
                Table(
                    columns=tuple(item["columns"]),
                    rows=tuple(tuple(r) for r in item["rows"]),
                    title=item.get("title"),
                    numeric=tuple(item.get("numeric", ())),
                )
            )
        elif kind == "Actions":
            blocks.append(Actions(tuple(Button(**b) for b in item["buttons"])))
        else:
            raise ValueError(f"unknown message block {kind!r}")
    return Message(summary=str(data["summary"]), blocks=tuple(blocks))
