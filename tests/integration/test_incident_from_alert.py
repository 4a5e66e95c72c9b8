"""*Declare incident* on an alert post: the incident carries the alert's queue, however
the button is pressed (a chat's button, or the command the console shows for it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.render_text import render_message
from commands.model import Declare
from services.alerts.messages import root
from services.alerts.store import read_group
from services.message import Actions
from tests.helpers.people import DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import AlertBot, alert, alert_bot, notification
from tests.integration.incident_support import ACTORS, as_person

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

EXTRA = (
    DORA_TOML
    + ACTORS
    + DUTY_OFFICER_TOML
    + """
[[alerts.routes]]
name = "loss-to-operators"
alertname = "QueueLoss"
channels = ["operators"]
scenario = "gd:queue-loss"
"""
)


async def fire(bot: AlertBot) -> str:
    """QueueLoss fires on workers; the command its Declare incident button stands for."""
    labels = {"alertname": "QueueLoss", "queue": "workers"}
    body = notification(group=labels, alerts=[alert("f1", labels=labels, summary="gone")])
    assert (await bot.send(body)).status_code == 200
    await bot.settle()
    (root,) = bot.roots("C0OPS")
    button = next(
        e
        for b in root.body["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"].startswith("inc:declare:")
    )
    return str(button["action_id"])


async def queue_of_incident(bot: AlertBot) -> str | None:
    incidents = bot.app.router.deps.incidents
    assert incidents is not None
    return (await incidents.view(1)).queue


async def test_the_button_declares_on_the_alerts_queue(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=EXTRA) as bot:
        action = await fire(bot)
        group = int(action.rsplit(":", 1)[1])
        reply = await bot.app.router.handle(Declare(alert_group=group), as_person(bot))
        assert "INC-1 declared" in render_message(reply.message)
        assert await queue_of_incident(bot) == "workers"


async def test_the_console_command_of_the_button_declares_on_the_alerts_queue(
    db_url: str, tmp_path: Path
) -> None:
    """Where there are no buttons (the console) the post shows the command the button
    stands for; typed, it declares on the alert's queue too."""
    async with alert_bot(db_url, tmp_path, extra=EXTRA) as bot:
        await fire(bot)
        async with bot.app.state_engine.connect() as conn:
            group = await read_group(conn, 1)
        assert group is not None
        post = root(group, now=bot.clock.now)
        shown = render_message(post)
        command = next(
            b.command for block in post.blocks if isinstance(block, Actions) for b in block.buttons
        )
        assert command is not None and command in shown
        reply = await bot.app.router.handle_line(command, as_person(bot))
        assert "INC-1 declared" in render_message(reply.message)
        assert await queue_of_incident(bot) == "workers"
