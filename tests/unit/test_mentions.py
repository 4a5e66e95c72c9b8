"""Whom a post calls (``Message.mentions``): each platform's own mention where the person
or group has an id there, by name elsewhere; on Discord, allowed to ping them alone. No
id makes a mention of a whole channel, whatever it holds."""

from __future__ import annotations

import pytest

from bot.discord.notifier import allowed
from bot.discord.render import render
from bot.render_text import render_message
from bot.slack.render import blocks, fallback_text
from services.message import Mention, Message, Text, message_from_json, message_json

BOB = Mention("bob", slack="U0BOB", discord="100000000000000002")
DUTY = Mention("rota:prod-ops", slack="S0DUTY", discord="300000000000000001", group=True)
CONSOLE_ONLY = Mention("dora")


def test_each_platform_has_its_own_mention_and_text_names_them() -> None:
    assert [BOB.on("slack"), BOB.on("discord"), BOB.on("console")] == [
        "<@U0BOB>",
        "<@100000000000000002>",
        None,
    ]
    assert [DUTY.on("slack"), DUTY.on("discord")] == ["<!subteam^S0DUTY>", "<@&300000000000000001>"]
    assert CONSOLE_ONLY.on("slack") is None and CONSOLE_ONLY.on("discord") is None
    message = Message("s", (Text("⏰ the operators are due"),), mentions=(BOB, DUTY, CONSOLE_ONLY))
    assert render_message(message) == "@bob @rota:prod-ops @dora\n⏰ the operators are due"
    assert message_from_json(message_json(message)) == message


@pytest.mark.parametrize(
    "mention",
    [
        Mention("x", slack="channel"),
        Mention("x", slack="!here"),
        Mention("x", slack="U0BOB>"),
        Mention("x", slack="S0DUTY"),  # a group's id, not marked a group
        Mention("x", slack="U0BOB", group=True),  # a person's id, marked a group
        Mention("x", discord="everyone"),
        Mention("x", discord="12345"),
        Mention("x", discord="100000000000000002>", group=True),
    ],
)
def test_an_id_that_is_no_account_or_group_mentions_nobody(mention: Mention) -> None:
    assert mention.on("slack") is None and mention.on("discord") is None


def test_discord_pings_those_the_post_calls_and_nobody_else() -> None:
    message = Message(
        "s",
        (Text("@everyone <@100000000000000009> look"),),
        mentions=(BOB, DUTY, CONSOLE_ONLY, Mention("everyone")),
    )
    rendered = render(message)
    first, rest = rendered.content.split("\n", 1)
    assert first == "<@100000000000000002> <@&300000000000000001> @dora @\u200beveryone"
    assert "<@1" not in rest and "@everyone" not in rest  # the text still mentions nobody
    assert (rendered.users, rendered.roles) == (("100000000000000002",), ("300000000000000001",))
    ping = allowed(rendered)
    assert ping.everyone is False
    assert [u.id for u in ping.users] == [100000000000000002]  # type: ignore[union-attr]
    assert [r.id for r in ping.roles] == [300000000000000001]  # type: ignore[union-attr]
    quiet = allowed(render(Message("s", (Text("<@100000000000000002>"),))))
    assert (quiet.everyone, quiet.users, quiet.roles) == (False, False, False)


def test_slack_calls_its_users_and_groups_and_escapes_the_rest() -> None:
    message = Message(
        "INC-1: tell the operators <!channel>",
        (Text("@here <!here> <@U0EVE> due"),),
        mentions=(BOB, DUTY, CONSOLE_ONLY, Mention("x", slack="channel")),
    )
    first, second = blocks(message)
    assert first["text"]["text"] == "<@U0BOB> <!subteam^S0DUTY> @dora @x"
    assert second["text"]["text"] == "@here &lt;!here&gt; &lt;@U0EVE&gt; due"
    assert fallback_text(message) == (
        "<@U0BOB> <!subteam^S0DUTY> @dora @x INC-1: tell the operators &lt;!channel&gt;"
    )
    plain = Message("s", (Text("t"),))
    assert len(blocks(plain)) == 1 and fallback_text(plain) == "s"
