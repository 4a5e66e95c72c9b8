"""Discord rendering of platform-neutral messages.

Discord's limits shape it: 2,000 characters of content, 5 rows of 5 buttons, 80
characters in a button's label, 100 in its custom_id. queuebot sends plain content (no
embeds, so their 10 and 6,000 characters never bind). An answer longer than the content
allows is not cut: the first part is shown and the whole answer is attached as a text
file.

What queuebot shows comes from people and from alerts: it must never mention anyone or
hide a link. Text outside code is markdown-escaped (a masked link ``[x](url)`` shows as
typed, its address visible), and every mention Discord would read (``@everyone``,
``@here``, ``<@id>``, ``<@&role>``, ``<#channel>``) is broken with a zero-width space,
in code too, so it shows as typed and links nowhere; and every message goes out with
allowed_mentions none besides (bot/discord/client.py), so nothing pings even where text
slipped through. The only mentions queuebot makes are its own: of the person an answer
is for, allowed for that person alone (bot/discord/interactions.py), and of those a post
calls (``Message.mentions``: an incident's lead, a rota's role), on a line of their own
before the text and allowed for them alone (``Rendered.users``, ``Rendered.roles``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.render_text import render_message, table_text
from services.message import (
    Actions,
    Block,
    Button,
    Fields,
    Heading,
    Mention,
    Message,
    Table,
    Text,
)

MAX_CONTENT = 2000
MAX_ROWS = 5
MAX_PER_ROW = 5
MAX_LABEL = 80
MAX_CUSTOM_ID = 100
ATTACHMENT = "answer.txt"


@dataclass(frozen=True)
class Rendered:
    content: str
    buttons: tuple[Button, ...] = ()
    attachment: bytes | None = None  # the whole answer, when the content could not hold it
    users: tuple[str, ...] = ()  # the user ids its mentions may ping
    roles: tuple[str, ...] = ()  # the role ids its mentions may ping


# Discord's markdown outside code: emphasis, spoilers, code, escapes, the brackets of a
# masked link ``[x](url)`` (each one: discord.py's escape_markdown escapes only the first
# of several on a line), and block quotes, headings and list items at a line's start.
_MARKUP = re.compile(r"[\\*_~|`\[\]]|^>(?:>>)?(?=\s)|^#|^[ \t]*-", re.MULTILINE)
# A link Discord shows as one: left whole, so it still works and shows where it goes; a
# bracket or a backslash ends it (so none goes unescaped).
_LINK = re.compile(
    r"<[^: >\[\]\\]+:/[^ >\[\]\\]+>|(?:https?|steam)://[^\s<\[\]\\]*[^<.,:;\"'\[\]\s\\]"
)


def plain(text: str) -> str:
    """``text`` as Discord shows it when it is no markup at all: every markdown character
    escaped with a backslash (which Discord shows as the character), links kept whole."""
    out: list[str] = []
    at = 0
    for link in _LINK.finditer(text):
        out.append(_escape(text[at : link.start()]))
        out.append(link[0])
        at = link.end()
    out.append(_escape(text[at:]))
    return "".join(out)


def _escape(prose: str) -> str:
    # the backslash goes before the character itself: a list item's dash after its indent
    return _MARKUP.sub(lambda m: f"{m[0][:-1]}\\-" if m[0].endswith("-") else f"\\{m[0]}", prose)


# What Discord reads as a mention: @everyone and @here, and the <@…>, <@!…>, <@&…> and <#…>
# forms (a user, a nickname, a role, a channel).
_MENTION = re.compile(r"@(everyone|here)|<(?=[@#])")
ZERO_WIDTH = "\u200b"


def unmention(text: str) -> str:
    """``text`` with every mention broken by a zero-width space: it reads the same and
    mentions nobody."""
    return _MENTION.sub(lambda m: f"@{ZERO_WIDTH}{m[1]}" if m[1] else f"<{ZERO_WIDTH}", text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _in_code(text: str | None) -> str:
    return (text or "").replace("`", "'")


def _code(text: str) -> str:
    return "```\n" + text.replace("```", "'''") + "\n```"


def block_text(block: Block) -> str:
    if isinstance(block, Heading):
        return f"**{plain(block.text)}**"
    if isinstance(block, Text):
        return _code(block.text) if block.mono else plain(block.text)
    if isinstance(block, Fields):
        return "\n".join(f"**{plain(label)}**: {plain(value)}" for label, value in block.items)
    if isinstance(block, Table):
        title = f"**{plain(block.title)}**\n" if block.title else ""
        return title + _code(table_text(block, with_title=False))
    if isinstance(block, Actions):
        # the buttons are drawn as buttons; those that cannot be say their typed command
        shown = [b for b in block.buttons if b.command and b not in usable_buttons((block,))]
        # a backtick in the command (an alert's name in it) would end the code span early
        return "\n".join(f"{plain(b.label)}: `{_in_code(b.command)}`" for b in shown)
    raise TypeError(f"unknown block {block!r}")


def usable_buttons(blocks: tuple[Block, ...]) -> tuple[Button, ...]:
    """The buttons Discord can draw: custom_id within 100 characters, 25 at most."""
    found = [
        b
        for block in blocks
        if isinstance(block, Actions)
        for b in block.buttons
        if 0 < len(b.action_id) <= MAX_CUSTOM_ID
    ]
    return tuple(found[: MAX_ROWS * MAX_PER_ROW])


def _called(mentions: tuple[Mention, ...]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The line of mentions (by name where one has no Discord id), and the user and role
    ids it may ping."""
    shown = [m.on("discord") or unmention(plain(m.text())) for m in mentions]
    users = tuple(m.discord for m in mentions if m.discord and m.on("discord") and not m.group)
    roles = tuple(m.discord for m in mentions if m.discord and m.on("discord") and m.group)
    return (" ".join(shown) + "\n" if shown else ""), users, roles


def render(message: Message) -> Rendered:
    parts = [t for t in (block_text(b) for b in message.blocks) if t]
    called, users, roles = _called(message.mentions)
    content = called + unmention("\n".join(parts) if parts else plain(message.summary))
    buttons = usable_buttons(message.blocks)
    if len(content) <= MAX_CONTENT:
        return Rendered(content or "(empty)", buttons, users=users, roles=roles)
    note = f"\n… the full answer is attached ({ATTACHMENT})"
    head = _first_lines(content, MAX_CONTENT - len(note) - 8)
    full = render_message(message).encode()
    return Rendered(head + note, buttons, attachment=full, users=users, roles=roles)


def _first_lines(content: str, budget: int) -> str:
    """As many whole lines as fit, an open code block closed again."""
    kept: list[str] = []
    size = 0
    for line in content.splitlines():
        if size + len(line) + 1 > budget:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept:
        return _cut(content, budget)
    text = "\n".join(kept)
    if text.count("```") % 2 == 1:
        text += "\n```"
    return text


def label(button: Button) -> str:
    return _cut(button.label, MAX_LABEL)
