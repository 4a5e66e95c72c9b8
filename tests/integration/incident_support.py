"""What the incident tests over ``alert_bot`` share: the actors' channel (as configuration
to add to the bot's; the people who declare and approve are tests/helpers/people.py's),
and saying a command line as one of them."""

from __future__ import annotations

import sqlalchemy as sa

from bot.render_text import render_message
from commands.context import Invocation
from commands.reply import Reply
from services.jsonable import loads
from services.message import message_from_json
from tests.integration.alerting import AlertBot

ACTORS = """
[channels.actors]
slack = "C0ACTORS"
"""


def as_person(bot: AlertBot, who: str = "dora", *, channel: str | None = None) -> Invocation:
    return Invocation(
        person=bot.app.directory.by_name(who), platform="console", account=who, channel=channel
    )


async def say(bot: AlertBot, line: str, *, channel: str | None = None) -> str:
    """``line`` as dora, rendered as text."""
    return await say_as(bot, "dora", line, channel=channel)


async def say_as(bot: AlertBot, who: str, line: str, *, channel: str | None = None) -> str:
    reply: Reply = await bot.app.router.handle_line(line, as_person(bot, who, channel=channel))
    return render_message(reply.message)


async def thread_posts(bot: AlertBot, number: int = 1) -> list[str]:
    """What the incident's thread is sent, as queued in the outbox, rendered as text."""
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT payload FROM qb_outbox WHERE kind = 'incident.post' ORDER BY id")
        )
        payloads = [p if isinstance(p, dict) else loads(p) for p in found.scalars()]
    return [
        render_message(message_from_json(p["message"]))
        for p in payloads
        if p["action"] == "thread" and p["incident"] == number
    ]
