"""Buttons that survive restarts: each is a ``DynamicItem`` whose template reads the
request (or queue, or incident) back out of its custom_id, registered in the client's
``setup_hook``. A click on a message posted before a restart is dispatched by template,
not by a view this process remembers. Approving twice acts once: the change request's
state moves from pending exactly once, and the second click gets a clear refusal.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import discord

from bot.delivery import Asked
from bot.discord.forms import open_declaration
from bot.discord.interactions import DiscordWiring, run_command
from bot.discord.render import Rendered, label
from commands import messages
from commands.reply import Reply
from services.button_ids import CHANGE, INCIDENT, QUEUE, IncidentDeclaration, parse
from services.message import Button

STYLES = {
    "primary": discord.ButtonStyle.primary,
    "danger": discord.ButtonStyle.danger,
}


def _wiring(interaction: discord.Interaction[Any]) -> DiscordWiring:
    wiring = getattr(interaction.client, "wiring", None)
    if not isinstance(wiring, DiscordWiring):
        raise RuntimeError("a queuebot button was clicked on a client without its wiring")
    return wiring


class _Clicks:
    """What every queuebot button does: its custom_id says which command it stands for,
    and the click runs that command. Mixed into each DynamicItem below (a DynamicItem
    class must name its template)."""

    action_id: str

    def __init__(self, button: Button) -> None:
        super().__init__(  # type: ignore[call-arg]
            discord.ui.Button(
                label=label(button),
                style=STYLES.get(button.style or "", discord.ButtonStyle.secondary),
                custom_id=button.action_id,
            )
        )
        self.action_id = button.action_id

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> Any:
        return cls(Button(action_id=match.string, label=getattr(item, "label", None) or "…"))

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        w = _wiring(interaction)
        pressed = parse(self.action_id)
        if pressed is None:
            await answer_unknown(interaction, self.action_id)
            return
        if isinstance(pressed, IncidentDeclaration):  # the declaration form, filled in
            await open_declaration(interaction, alert_group=pressed.alert_group)
            return
        await run_command(
            w,
            interaction,
            Asked(action_id=self.action_id),
            private=True,
            where=f"Discord button {self.action_id}",
        )


class ChangeButton(_Clicks, discord.ui.DynamicItem[discord.ui.Button[Any]], template=CHANGE):
    """Approve / Reject on a change request: ``cr:approve:17``, ``cr:reject:17``."""


class ReadButton(_Clicks, discord.ui.DynamicItem[discord.ui.Button[Any]], template=QUEUE):
    """An alert thread's reads: ``q:triage:QUEUE``, ``q:failed:QUEUE``."""


class IncidentButton(_Clicks, discord.ui.DynamicItem[discord.ui.Button[Any]], template=INCIDENT):
    """Declare incident from an alert thread, Send draft in an incident's thread."""


DYNAMIC_ITEMS = (ChangeButton, ReadButton, IncidentButton)


QueuebotButton = ChangeButton | ReadButton | IncidentButton


def item_for(button: Button) -> QueuebotButton | None:
    for kind in DYNAMIC_ITEMS:
        if re.fullmatch(kind.__discord_ui_compiled_template__, button.action_id):
            return kind(button)
    return None


def view_for(rendered: Rendered) -> discord.ui.View | None:
    """The buttons of a message, five to a row (Discord takes five rows)."""
    items = [i for i in (item_for(b) for b in rendered.buttons) if i is not None]
    if not items:
        return None
    view = discord.ui.View(timeout=None)
    for n, item in enumerate(items[:25]):
        item.row = n // 5
        view.add_item(item)
    return view


def is_ours(custom_id: str) -> bool:
    """A custom_id one of the dynamic items takes (its click is answered there)."""
    return any(
        re.fullmatch(kind.__discord_ui_compiled_template__, custom_id) for kind in DYNAMIC_ITEMS
    )


async def answer_unknown(interaction: discord.Interaction[Any], custom_id: str) -> None:
    """A click on a button queuebot cannot act on: nothing is done, the person is told."""
    reply: Reply = messages.unknown_button(custom_id)
    rendered_text = reply.message.summary[:2000]
    # a stale one: Discord has told the person the interaction failed already
    with contextlib.suppress(discord.HTTPException):
        await interaction.response.send_message(rendered_text, ephemeral=True)
