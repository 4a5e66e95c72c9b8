"""Forms on Discord: a modal drawn from a ``Form`` (commands/forms.py) with discord.py's
own components (a ``Label`` around each ``TextInput`` or ``Select``, which check
Discord's limits), sent as the interaction's *first* response: the decision is made
before anything is deferred.

A modal's custom_id, ``qbform:KIND:TARGET``, carries all the form needs besides its
fields, so a submission is read the same by any process. Discord cannot show an error on
a field: a submission with a wrong value is answered with a message only its sender sees,
naming the field and what is right, and a button "Open the form again" that opens it
holding what they typed; nothing is written down. A right one is written down in the
delivery ledger before its first response (as every interaction is: bot/delivery.py) and
runs as the command typed whole would.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import time
from typing import Any

import discord
from discord import app_commands

from bot.boundary import answer
from bot.delivery import Asked
from bot.discord.interactions import DiscordWiring, roles_of, run_command
from bot.discord.render import plain, render
from commands.forms import (
    FORMS,
    Form,
    declare_form,
    form_again,
    form_for_options,
    not_opened,
    spec_of,
    submitted,
)
from commands.reply import Reply

log = logging.getLogger("queuebot.discord")
MODAL = re.compile(r"qbform:(?P<kind>[a-z]{1,20}):(?P<target>[0-9]{1,12})")
FORM_LIFE = 15 * 60.0  # seconds a modal (or its "Open the form again") is kept


class FormModal(discord.ui.Modal):
    """A form as a modal. Its submission is read in ``on_submitted`` from the interaction
    itself, by any process; this one only draws it."""

    def __init__(self, form: Form) -> None:
        title = form.title if len(form.title) <= 45 else form.title[:44] + "…"
        super().__init__(
            title=title, timeout=FORM_LIFE, custom_id=f"qbform:{form.kind}:{form.target or 0}"
        )
        for field in form.fields:
            component: discord.ui.Item[Any]
            if field.kind == "choice":
                if not field.options:
                    continue
                component = discord.ui.Select(
                    custom_id=field.name,
                    options=[
                        discord.SelectOption(
                            label=_cut(c.label, 100),
                            value=c.value[:100],
                            default=c.value == field.initial,
                        )
                        for c in field.options[:25]
                    ],
                    min_values=1 if field.required else 0,
                    required=field.required,
                )
            else:
                component = discord.ui.TextInput(
                    custom_id=field.name,
                    style=discord.TextStyle.paragraph
                    if field.kind == "paragraph"
                    else discord.TextStyle.short,
                    default=_cut(field.initial, field.max_length) if field.initial else None,
                    required=field.required,
                    max_length=min(field.max_length, 4000),
                    placeholder=_cut(field.hint, 100) if field.hint else None,
                )
            self.add_item(
                discord.ui.Label(
                    text=_cut(field.label, 45),
                    component=component,
                    description=_cut(field.hint, 100) if field.hint else None,
                )
            )

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        """Nothing here: ``on_submitted`` answers every queuebot form, from the
        interaction, whichever process opened it."""


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _wiring(interaction: discord.Interaction[Any]) -> DiscordWiring:
    wiring = getattr(interaction.client, "wiring", None)
    if not isinstance(wiring, DiscordWiring):
        raise RuntimeError("a queuebot form reached a client without its wiring")
    return wiring


async def show(interaction: discord.Interaction[Any], found: Form | Reply | None) -> bool:
    """Send the form (or the refusal that stands in its place) as the interaction's first
    response: True when the person was answered so. A stale interaction (Discord no
    longer takes a first response) is answered in the channel, in words."""
    if found is None:
        return False
    try:
        if isinstance(found, Reply):
            await interaction.response.send_message(render(found.message).content, ephemeral=True)
        else:
            await interaction.response.send_modal(FormModal(found))
    except discord.HTTPException as exc:
        log.warning(
            "Discord refused a form's first response to interaction %s (%s %s)",
            interaction.id,
            exc.status,
            exc.code,
        )
        channel = interaction.channel
        if isinstance(found, Form) and isinstance(channel, discord.abc.Messageable):
            words = not_opened(found, "expired_trigger_id").message.summary
            with contextlib.suppress(discord.HTTPException):
                await channel.send(
                    f"<@{interaction.user.id}> {words}"[:2000],
                    allowed_mentions=discord.AllowedMentions(users=[interaction.user]),
                )
    return True


async def open_if_needed(
    w: DiscordWiring,
    interaction: discord.Interaction[Any],
    group: str,
    name: str,
    values: dict[str, Any],
) -> bool:
    """A slash command missing what a form asks: the form opens in its place (True)."""
    if FORMS.get(name) != group:
        return False
    inv = _invocation(w, interaction)
    found = await answer(
        form_for_options(w.router, group, name, values, inv),
        correlation_id=inv.correlation_id,
        where=f"Discord /{group} {name} form",
    )
    return await show(interaction, found)


async def open_declaration(
    interaction: discord.Interaction[Any],
    *,
    alert_group: int | None = None,
    summary: str | None = None,
) -> None:
    """The declaration form, from an alert's Declare incident (``alert_group``) or a
    message's "Declare incident" (its text the summary)."""
    w = _wiring(interaction)
    inv = _invocation(w, interaction)
    found = await answer(
        declare_form(w.router, inv, alert_group=alert_group, summary=summary),
        correlation_id=inv.correlation_id,
        where="Discord declare form",
    )
    await show(interaction, found)


def _invocation(w: DiscordWiring, interaction: discord.Interaction[Any]) -> Any:
    channel = interaction.channel_id
    return w.invocation(
        str(interaction.user.id),
        str(channel) if channel is not None else None,
        chat_roles=roles_of(interaction),
    )


def values_of(data: Any) -> dict[str, str]:
    """What a modal submission holds, by field: a text input's value, a select's first
    chosen value ("" for none), wherever Discord nests them."""
    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        custom_id = node.get("custom_id")
        if isinstance(custom_id, str) and ("value" in node or "values" in node):
            chosen = node.get("values")
            value = node.get("value") if chosen is None else (chosen[0] if chosen else "")
            found[custom_id] = value if isinstance(value, str) else ""
        walk(node.get("components"))
        walk(node.get("component"))

    walk(data.get("components") if isinstance(data, dict) else None)
    return found


async def on_submitted(interaction: discord.Interaction[Any]) -> None:
    """A queuebot form submitted: run the command it makes, or say what is wrong."""
    data: dict[str, Any] = dict(interaction.data or {})
    found = MODAL.fullmatch(str(data.get("custom_id", "")))
    if found is None or found["kind"] not in FORMS:
        return
    kind, target = found["kind"], int(found["target"]) or None
    values = values_of(data)
    result = submitted(kind, target, values)
    w = _wiring(interaction)
    if result.text is not None:
        spec = spec_of(kind)
        await run_command(
            w,
            interaction,
            Asked(group=spec.group, text=result.text),
            private=spec.role == "viewer" and not spec.changes,
            where=f"Discord form {spec.path}",
        )
        return
    inv = _invocation(w, interaction)
    again = await answer(
        form_again(w.router, kind, target, inv),
        correlation_id=inv.correlation_id,
        where=f"Discord form {kind}",
    )
    if isinstance(again, Reply):  # refused meanwhile, or what else stands in the way
        await show(interaction, again)
        return
    labels = {f.name: f.label for f in again.fields}
    said = "\n".join(f"- {labels.get(n, n)}: {plain(e)}" for n, e in result.errors.items())
    text = f"The form was not sent, nothing was done:\n{said}"
    with contextlib.suppress(discord.HTTPException):
        await interaction.response.send_message(
            text[:2000], ephemeral=True, view=_again(again.refilled(values))
        )


# What an "Open the form again" button opens: the form holding what was typed, kept in
# this process for FORM_LIFE (what was typed does not fit in a custom_id)
_AGAIN: dict[str, tuple[Form, float]] = {}
AGAIN = re.compile(r"qbform-again:[0-9a-f]{32}")
AGAIN_KEPT = 10_000


def _again(form: Form) -> discord.ui.View:
    now = time.monotonic()
    for custom_id in [k for k, (_, until) in _AGAIN.items() if until < now]:
        del _AGAIN[custom_id]
    while len(_AGAIN) >= AGAIN_KEPT:  # a flood of wrong submissions: the oldest go first
        del _AGAIN[next(iter(_AGAIN))]
    custom_id = f"qbform-again:{secrets.token_hex(16)}"
    _AGAIN[custom_id] = (form, now + FORM_LIFE)
    view = discord.ui.View(timeout=FORM_LIFE)
    view.add_item(
        discord.ui.Button(
            label="Open the form again", style=discord.ButtonStyle.primary, custom_id=custom_id
        )
    )
    return view


async def reopen(interaction: discord.Interaction[Any], custom_id: str) -> None:
    """ "Open the form again": the form as it was sent, or, where it is gone (queuebot
    restarted, or the button is older than the form's life), what to do instead."""
    kept = _AGAIN.get(custom_id)
    if kept is not None and kept[1] >= time.monotonic():
        await show(interaction, kept[0])
        return
    with contextlib.suppress(discord.HTTPException):
        await interaction.response.send_message(
            "That form is gone (queuebot restarted since, or it is older than 15 minutes), "
            "so nothing was done; run the command again.",
            ephemeral=True,
        )


def context_menu() -> app_commands.ContextMenu:
    """A message's "Declare incident": the declaration form, its summary the message."""

    async def declare_from(interaction: discord.Interaction[Any], message: discord.Message) -> None:
        text = message.content.strip()
        await open_declaration(interaction, summary=text or None)

    return app_commands.ContextMenu(name="Declare incident", callback=declare_from)
