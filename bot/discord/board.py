"""The board on Discord: Discord has no App Home, so queuebot keeps one status message in
``[discord] board_channel``, the board for anyone (every pending request "waiting for
approval"), posted once and then edited in place on every refresh
(services/board/publish.py). Its id is kept with the board's places, so a restart edits
the same message; one deleted meanwhile is posted again.

Each section of the board is an embed (its heading the title, its lines the
description), within Discord's limits: 10 embeds, 4,096 characters of description, 256
of title and 6,000 in all; a section too long for its share is cut by whole lines with a
line saying how many more there are and where to see them. The Approve and Reject
buttons are those of the requests' own messages (at most 20 on a board; Discord takes 25).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import discord

from bot.discord.buttons import view_for
from bot.discord.notifier import DiscordNotifier
from bot.discord.render import Rendered, plain, unmention, usable_buttons
from bot.render_text import table_text
from services.board.shown import Place
from services.errors import Unavailable
from services.message import Actions, Block, Heading, Message, Table, Text

MAX_EMBEDS = 10
MAX_TITLE = 256
MAX_DESCRIPTION = 4096
MAX_TOTAL = 6000  # characters across every embed of a message
MAX_CONTENT = 2000
SEE_ALL = "/queue board shows them all"


@dataclass
class _Section:
    title: str
    lines: list[str] = field(default_factory=list)

    def size(self) -> int:
        return len(self.title) + len(self.description())

    def description(self) -> str:
        return "\n".join(self.lines)


def board_embeds(message: Message) -> tuple[str, list[dict[str, Any]]]:
    """The board as content (its first heading) and embeds within Discord's limits."""
    sections: list[_Section] = []
    content = ""
    for block in message.blocks:
        if isinstance(block, Heading):
            if not content and not sections:
                content = f"**{plain(block.text)}**"
                continue
            sections.append(_Section(unmention(plain(block.text))[:MAX_TITLE]))
        elif sections:
            sections[-1].lines += _lines(block)
        else:
            content += "\n" + "\n".join(_lines(block))
    if len(sections) > MAX_EMBEDS:  # never on a board (six sections at most)
        left = sections[MAX_EMBEDS - 1 :]
        sections = sections[: MAX_EMBEDS - 1]
        sections.append(_Section(f"{len(left)} more section(s)", [SEE_ALL]))
    for section in sections:
        _cut(section, MAX_DESCRIPTION)
    while sum(s.size() for s in sections) > MAX_TOTAL:
        longest = max(sections, key=lambda s: len(s.description()))
        if len(longest.description()) <= 400:
            break  # never: six sections, each titled in a few words
        _cut(longest, len(longest.description()) - 200)
    embeds = [{"title": s.title, "description": s.description() or "-"} for s in sections]
    return unmention(content)[:MAX_CONTENT], embeds


def _lines(block: Block) -> list[str]:
    if isinstance(block, Text):
        return unmention(plain(block.text)).splitlines()
    if isinstance(block, Table):
        return ["```", *unmention(table_text(block, with_title=False)).splitlines(), "```"]
    if isinstance(block, Actions):
        return []  # drawn as buttons
    return unmention(plain(str(block))).splitlines()


def _cut(section: _Section, budget: int) -> None:
    """Keep the section's first lines within ``budget`` characters, and say how many more
    there are (an open code block closed first)."""
    if len(section.description()) <= budget:
        return
    kept: list[str] = []
    size = 0
    for line in section.lines:
        if size + len(line) + 1 > budget - 80:
            break
        kept.append(line)
        size += len(line) + 1
    more = len(section.lines) - len(kept)
    if kept.count("```") % 2 == 1:
        kept.append("```")
    section.lines = [*kept, f"… {more} more line(s): {SEE_ALL}"]


class DiscordBoard:
    """The board's surface on Discord: one status message in ``channel``."""

    platform = "discord"

    def __init__(self, notifier: DiscordNotifier, channel: str) -> None:
        self.notifier = notifier
        self.channel: str | None = channel

    async def show(self, place: Place, message: Message) -> str | None:
        client = await self.notifier.ready()
        content, shown = board_embeds(message)
        embeds = [discord.Embed.from_dict(e) for e in shown]
        view = view_for(Rendered(content, usable_buttons(message.blocks)))
        where = client.get_partial_messageable(int(place.account))
        quiet = discord.AllowedMentions.none()
        if place.message_id is not None:
            try:
                await where.get_partial_message(int(place.message_id)).edit(
                    content=content, embeds=embeds, view=view, allowed_mentions=quiet
                )
                return place.message_id
            except discord.NotFound:
                pass  # deleted: posted again below
            except discord.HTTPException as exc:
                raise Unavailable(f"Discord refused to edit the board: {exc.status}") from exc
        try:
            if view is not None:
                sent = await where.send(content, embeds=embeds, view=view, allowed_mentions=quiet)
            else:
                sent = await where.send(content, embeds=embeds, allowed_mentions=quiet)
        except discord.HTTPException as exc:
            raise Unavailable(f"Discord refused the board: {exc.status} {exc.text[:200]}") from exc
        return str(sent.id)
