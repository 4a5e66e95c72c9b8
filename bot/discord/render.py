"""Discord rendering of platform-neutral messages.

Discord's limits shape it: 2,000 characters of content, 5 rows of 5 buttons, 80
characters in a button's label, 100 in its custom_id. queuebot sends plain content (no
embeds, so their 10 and 6,000 characters never bind). An answer longer than the content
allows is not cut: the first part is shown and the whole answer is attached as a text
file. Mentions in what queuebot echoes never ping anyone (allowed_mentions none).
"""

from __future__ import annotations

from dataclasses import dataclass

from discord.utils import escape_markdown

from bot.render_text import render_message, table_text
from services.message import Actions, Block, Button, Fields, Heading, Message, Table, Text

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


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str) -> str:
    return "```\n" + text.replace("```", "'''") + "\n```"


def block_text(block: Block) -> str:
    if isinstance(block, Heading):
        return f"**{escape_markdown(block.text)}**"
    if isinstance(block, Text):
        return _code(block.text) if block.mono else escape_markdown(block.text)
    if isinstance(block, Fields):
        return "\n".join(
            f"**{escape_markdown(label)}**: {escape_markdown(value)}"
            for label, value in block.items
        )
    if isinstance(block, Table):
        title = f"**{escape_markdown(block.title)}**\n" if block.title else ""
        return title + _code(table_text(block, with_title=False))
    if isinstance(block, Actions):
        # the buttons are drawn as buttons; those that cannot be say their typed command
        shown = [b for b in block.buttons if b.command and b not in usable_buttons((block,))]
        return "\n".join(f"{b.label}: `{b.command}`" for b in shown)
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


def render(message: Message) -> Rendered:
    parts = [t for t in (block_text(b) for b in message.blocks) if t]
    content = "\n".join(parts) if parts else escape_markdown(message.summary)
    buttons = usable_buttons(message.blocks)
    if len(content) <= MAX_CONTENT:
        return Rendered(content or "(empty)", buttons)
    note = f"\n… the full answer is attached ({ATTACHMENT})"
    head = _first_lines(content, MAX_CONTENT - len(note) - 8)
    full = render_message(message).encode()
    return Rendered(head + note, buttons, attachment=full)


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
