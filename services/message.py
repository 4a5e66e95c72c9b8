"""Platform-neutral message content. Every adapter renders it its own way (Block Kit,
discord.py embeds and views, plain text); nothing here knows a platform."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# the only ids a mention is made of: a Slack user (U…, W…) or user group (S…), a Discord
# user or role (a snowflake); anything else is never sent as a mention
_SLACK_ID = re.compile(r"^[UWS][A-Z0-9]{2,20}\Z")
_SNOWFLAKE = re.compile(r"^[0-9]{15,21}\Z")


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
class Mention:
    """Someone a post calls: a person, or a group (a Slack user group, a Discord role),
    by the platform's own mention where they have an id there, by name elsewhere. Never a
    whole channel: only the ids below are ever written as a mention."""

    name: str  # how text names them: "bob", "rota:prod-ops"
    slack: str | None = None  # a user id (U…), or with ``group`` a user group id (S…)
    discord: str | None = None  # a user id, or with ``group`` a role id
    group: bool = False

    def on(self, platform: str) -> str | None:
        """The platform's mention, or None where they have no usable id there."""
        if platform == "slack" and self.slack and _SLACK_ID.match(self.slack):
            if self.group:
                return f"<!subteam^{self.slack}>" if self.slack.startswith("S") else None
            return None if self.slack.startswith("S") else f"<@{self.slack}>"
        if platform == "discord" and self.discord and _SNOWFLAKE.match(self.discord):
            return f"<@&{self.discord}>" if self.group else f"<@{self.discord}>"
        return None

    def text(self) -> str:
        return f"@{self.name}"


@dataclass(frozen=True)
class Message:
    """``summary`` is the one-line text used for notifications and fallbacks;
    ``mentions`` the people and groups the post calls, each platform by its own mention
    (a line before the blocks), the console by name."""

    summary: str
    blocks: tuple[Block, ...] = field(default_factory=tuple)
    mentions: tuple[Mention, ...] = ()


def message_json(message: Message) -> dict[str, Any]:
    """A message as JSON, for an outbox item that posts it later."""
    data: dict[str, Any] = {
        "summary": message.summary,
        "blocks": [_block_json(b) for b in message.blocks],
    }
    if message.mentions:
        data["mentions"] = [asdict(m) for m in message.mentions]
    return data


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
    mentions = tuple(Mention(**m) for m in data.get("mentions") or ())
    return Message(summary=str(data["summary"]), blocks=tuple(blocks), mentions=mentions)
