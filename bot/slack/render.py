"""Block Kit rendering of platform-neutral messages.

Every mrkdwn text is escaped (``&``, ``<``, ``>``), in the blocks and in the top-level
``text`` alike: what queuebot shows comes from people and from alerts, and must never
mention anyone or hide a link (headers and button labels are plain_text, which Slack
never reads as markup). Slack's limits shape it: at most 50 blocks, 3,000 characters in a
section's text, 150 in a header, 10 fields of 2,000 each, 75 in a button's label. Tables
become preformatted text, cut with a note of how much was left out rather than rejected
by Slack.

The only mentions queuebot makes are those a post calls (``Message.mentions``: an
incident's lead, a rota's user group), built from ids alone (``Mention.on``), on a line
of their own before the rest.
"""

from __future__ import annotations

from typing import Any

from bot.render_text import render_message, table_text
from services.message import Actions, Block, Fields, Heading, Message, Table, Text

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_FIELDS = 10
MAX_FIELD = 2000
MAX_BUTTON = 75
MAX_FALLBACK = 3000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escape(text: str) -> str:
    # Slack mrkdwn: &, < and > must be escaped, or <...> is read as a link or mention.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, MAX_SECTION)}}


def _preformatted(text: str) -> str:
    body = _escape(text)
    budget = MAX_SECTION - 8
    if len(body) > budget:
        lines, kept, size = body.splitlines(), [], 0
        for line in lines:
            if size + len(line) + 1 > budget - 40:
                break
            kept.append(line)
            size += len(line) + 1
        body = "\n".join(kept) + f"\n… {len(lines) - len(kept)} more line(s)"
    return f"```{body}```"


def block(b: Block) -> dict[str, Any]:
    if isinstance(b, Heading):
        return {
            "type": "header",
            "text": {"type": "plain_text", "text": _cut(b.text, MAX_HEADER), "emoji": False},
        }
    if isinstance(b, Text):
        return _section(_preformatted(b.text) if b.mono else _escape(b.text))
    if isinstance(b, Fields):
        return {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": _cut(f"*{_escape(label)}*\n{_escape(value)}", MAX_FIELD)}
                for label, value in b.items[:MAX_FIELDS]
            ],
        }
    if isinstance(b, Table):
        title = f"*{_escape(b.title)}*\n" if b.title else ""
        return _section(title + _preformatted(table_text(b, with_title=False)))
    if isinstance(b, Actions):
        buttons = []
        for button in b.buttons:
            item: dict[str, Any] = {
                "type": "button",
                "action_id": button.action_id,
                "value": button.action_id,
                "text": {"type": "plain_text", "text": _cut(button.label, MAX_BUTTON)},
            }
            if button.style:
                item["style"] = button.style
            buttons.append(item)
        return {"type": "actions", "elements": buttons}
    raise TypeError(f"unknown block {b!r}")


def called(message: Message) -> str:
    """The line of those the message calls: each by their Slack mention, or by name
    (escaped) where they have no Slack id."""
    return " ".join(m.on("slack") or _escape(m.text()) for m in message.mentions)


def blocks(message: Message, *, most: int = MAX_BLOCKS) -> list[dict[str, Any]]:
    """The message's blocks, at most ``most`` (a message's 50; a view's 100)."""
    rendered = [block(b) for b in message.blocks]
    if message.mentions:
        rendered.insert(0, _section(called(message)))
    if len(rendered) > most:
        actions = [b for b in rendered if b["type"] == "actions"]
        keep = most - 1 - len(actions)
        rendered = [
            *rendered[:keep],
            _section(
                f"_… {len(rendered) - keep - len(actions)} more block(s) "
                "left out; ask in the console for the full answer_"
            ),
            *actions,
        ]
    return rendered


def fallback_text(message: Message) -> str:
    """The ``text`` Slack shows in notifications and where blocks cannot be shown, escaped
    as the blocks are: Slack reads ``text`` as mrkdwn too, so an alert label, an incident
    summary or a notify text holding ``<!channel>``, ``<@U…>`` or ``<https://…|click>``
    is shown as typed, never turned into a mention or a disguised link; only those the
    message calls are mentioned, before it."""
    text = _escape(_cut(message.summary or render_message(message), MAX_FALLBACK))
    return f"{called(message)} {text}" if message.mentions else text
