"""Outside text (alert labels, incident summaries, notify texts) rendered for Slack and
Discord: whatever it holds, Slack's top-level text and Discord's content show it as typed
and mention nobody."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot.discord.render import render
from bot.slack.render import fallback_text
from services.message import Fields, Heading, Message, Text

PIECES = st.sampled_from(
    [
        "<!channel>",
        "<!here>",
        "<@U0BOB>",
        "<https://evil.example|click me>",
        "@everyone",
        "@here",
        "<@100000000000000002>",
        "<@!100000000000000002>",
        "<@&300000000000000001>",
        "<#200000000000000009>",
        "[click me](https://evil.example)",
        "\\",
        "`",
        "*",
        "\n",
        " ",
        "x",
        "https://example.com/a_b",
    ]
)
HOSTILE = st.lists(PIECES, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_slack_text_has_no_markup_left(text: str) -> None:
    shown = fallback_text(Message(summary=text))
    assert "<" not in shown and ">" not in shown
    assert shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == text[:3000]


@settings(max_examples=300, deadline=None)
@given(HOSTILE, HOSTILE)
@example("", "[click me](https://evil.example)\\[click me](https://evil.example)")
def test_discord_content_mentions_nobody_and_links_nothing(text: str, other: str) -> None:
    for message in (
        Message(summary=text),
        Message(summary="s", blocks=(Heading(text), Text(other), Fields(((text, other),)))),
    ):
        content = render(message).content
        assert re.search(r"@(everyone|here)|<[@#]", content) is None, content
        # every bracket is escaped: an odd number of backslashes before it
        for bracket in re.finditer(r"(\\*)\[", content):
            assert len(bracket[1]) % 2 == 1, content
