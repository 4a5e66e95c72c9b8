"""Plain-text rendering of platform-neutral messages (console, logs, fallbacks)."""

from __future__ import annotations

from services.format import clip
from services.message import Actions, Block, Fields, Heading, Message, Table, Text

MAX_CELL = 160


def render_message(message: Message) -> str:
    """The message as text; whom it calls (``mentions``) by name, on a line before it."""
    called = [" ".join(m.text() for m in message.mentions)] if message.mentions else []
    if not message.blocks:
        return "\n".join([*called, message.summary])
    return "\n".join([*called, *(_block(b) for b in message.blocks)]).rstrip()


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"== {block.text} =="
    if isinstance(block, Text):
        return block.text
    if isinstance(block, Fields):
        return "  ".join(f"{label}: {value}" for label, value in block.items)
    if isinstance(block, Table):
        return table_text(block)
    if isinstance(block, Actions):
        return "  ".join(
            f"[{b.label}]" + (f" {b.command}" if b.command else "") for b in block.buttons
        )
    raise TypeError(f"unknown block {block!r}")


def table_text(table: Table, *, with_title: bool = True) -> str:
    rows = [tuple(clip(c, MAX_CELL) for c in row) for row in table.rows]
    header = tuple(table.columns)
    widths = [
        max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
        for i in range(len(header))
    ]

    def line(cells: tuple[str, ...]) -> str:
        out = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if i in table.numeric:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell if last else cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines = [f"-- {table.title}"] if table.title and with_title else []
    lines.append(line(header))
    lines.extend(line(r) for r in rows)
    return "\n".join(lines)
