"""Answering one Discord interaction: within Discord's 3 seconds, once, through the one
error boundary (the delivery protocol of bot/delivery.py, with Discord's edges).

Every interaction is deferred first (a slash command shows "thinking…", a click is a
deferred update that changes nothing yet), so Discord has its first response at once
however long the command takes; the answer follows on the interaction's token. A token
lives 15 minutes: an answer ready later than that, or for an interaction Discord already
gave up on (a stale one), goes to the channel instead, where only an answer meant for
everyone is shown in full.

The delivery ledger keys each interaction by its id, as Slack's deliveries are keyed by
their ids: a change marks the key done in its own transaction.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import discord

from bot.delivery import Asked, Deliveries, Work
from bot.discord.render import ATTACHMENT, Rendered, render
from commands.reply import Reply
from services.ledger import Orphan

log = logging.getLogger("queuebot.discord")
TOKEN_LIFE = 15 * 60.0  # seconds an interaction's token can answer
NO_MENTIONS = discord.AllowedMentions.none()
# What Discord answers for a token that is dead: unknown interaction, unknown webhook,
# invalid webhook token.
DEAD_TOKEN = {10062, 10015, 50027}

ViewFactory = Callable[[Rendered], discord.ui.View | None]


@dataclass
class DiscordWiring(Deliveries):
    """The delivery protocol with Discord's edges: the first response is a defer, the
    answer goes on the interaction's token while it lives, in the channel after."""

    platform: ClassVar[str] = "discord"
    view: ViewFactory = lambda rendered: None
    client: discord.Client | None = None  # set by the client that carries this wiring
    # the status board's channel ([discord] board_channel): a decision clicked on the
    # board is answered to whoever clicked, never by rewriting the board's message
    board_channel: str | None = None


async def first_response(interaction: discord.Interaction[Any], *, private: bool) -> bool:
    """Defer: Discord's first response, at once. False when Discord no longer takes one
    (the interaction is stale: older than 3 s, or answered already)."""
    try:
        if interaction.type == discord.InteractionType.component:
            await interaction.response.defer()
        else:
            await interaction.response.defer(ephemeral=private, thinking=True)
    except discord.HTTPException as exc:
        log.warning(
            "Discord refused the first response to interaction %s (%s %s): answered in "
            "the channel instead",
            interaction.id,
            exc.status,
            exc.code,
        )
        return False
    return True


def key_of(interaction: discord.Interaction[Any]) -> str:
    return f"discord:interaction:{interaction.id}"


async def run_command(
    w: DiscordWiring,
    interaction: discord.Interaction[Any],
    asked: Asked,
    *,
    private: bool,
    where: str,
) -> None:
    """Answer a slash command or a click: write down what it asks and where to answer,
    defer, run the command once, then answer. A process that dies after the defer leaves
    the ledger row for another to finish (``resume``)."""
    key = key_of(interaction)
    written = await w.write_down(key, request_of(interaction, asked, private, where))
    if written.repeated:
        w.ignored(key)
        return
    live = await first_response(interaction, private=private)
    channel = interaction.channel_id
    inv = w.invocation(
        str(interaction.user.id),
        str(channel) if channel is not None else None,
        chat_roles=roles_of(interaction),
    )

    async def answer_here(reply: Reply, rewrite: bool) -> None:
        await deliver(w, interaction, reply, live=live, deferred_private=private, rewrite=rewrite)

    await w.take(Work(key, where, inv, asked), written, answer_here)


def _is_click(interaction: discord.Interaction[Any]) -> bool:
    return interaction.type == discord.InteractionType.component


def request_of(
    interaction: discord.Interaction[Any],
    asked: Asked,
    private: bool,
    where: str,
) -> dict[str, Any]:
    """What the ledger keeps of an interaction: enough to do it and answer it again (the
    token answers for 15 minutes; the channel after)."""
    return {
        "platform": "discord",
        "where": where,
        "user": str(interaction.user.id),
        "channel": str(interaction.channel_id) if interaction.channel_id is not None else None,
        "application_id": str(interaction.application_id),
        "token": interaction.token,
        "component": _is_click(interaction),
        "private": private,
        "group": asked.group,
        "name": asked.name,
        "text": asked.text,  # a form's command, as it would have been typed
        "values": asked.values,
        "action_id": asked.action_id,
        # the member's roles as Discord sent them: a resumed interaction is judged by them
        "roles": sorted(roles) if (roles := roles_of(interaction)) is not None else None,
    }


def roles_of(interaction: discord.Interaction[Any]) -> frozenset[str] | None:
    """The Discord roles the interaction's member holds, as the interaction carried them
    (``member.roles``); None outside a guild (a DM carries no member). discord.py keeps
    the ids as sent on ``Member._roles``; its ``roles`` property would drop any role its
    guild cache does not hold."""
    user = interaction.user
    if interaction.guild_id is None or not isinstance(user, discord.Member):
        return None
    return frozenset(str(r) for r in user._roles)


async def resume(w: DiscordWiring, orphan: Orphan) -> None:
    """Finish an interaction another process deferred and died on; the answer goes on the
    interaction's token while it lives, to the channel after, mentioning the person."""
    request = orphan.request
    asked = Asked(
        group=str(request.get("group") or ""),
        name=str(request.get("name") or ""),
        text=request.get("text") if isinstance(request.get("text"), str) else None,
        values=dict(request.get("values") or {}),
        action_id=str(request.get("action_id") or ""),
    )
    channel = request.get("channel")
    roles = request.get("roles")
    inv = w.invocation(
        str(request["user"]),
        str(channel) if channel is not None else None,
        chat_roles=frozenset(str(r) for r in roles) if isinstance(roles, list) else None,
    )
    work = Work(orphan.claim.key, str(request.get("where") or "Discord"), inv, asked)

    async def answer_here(reply: Reply, rewrite: bool) -> None:
        await answer_late(w, request, reply, acked=orphan.acked_at)

    await w.resume(work, orphan, answer_here)


async def answer_late(
    w: DiscordWiring, request: dict[str, Any], reply: Reply, *, acked: datetime | None
) -> None:
    """An answer for an interaction this process never saw: a follow-up on its token
    while the token lives (the first one fills a deferred "thinking…"), else the channel."""
    client = w.client
    if client is None:
        log.warning("an interaction's answer is ready but Discord is not connected")
        return
    clicked_on_board = bool(request.get("component")) and _on_board(w, request.get("channel"))
    private = reply.ephemeral or reply.error or clicked_on_board
    rendered = render(reply.message)
    view = w.view(rendered)
    if acked is not None and (discord.utils.utcnow() - acked).total_seconds() < TOKEN_LIFE - 30:
        hook = discord.Webhook.from_state(
            data={"id": request["application_id"], "type": 3, "token": request["token"]},
            state=client._connection,
        )
        try:
            await hook.send(**_followup_kwargs(rendered, view, private=private))
            return
        except discord.HTTPException as exc:
            if exc.code not in DEAD_TOKEN and exc.status not in (401, 404):
                log.warning("Discord refused an answer: %s %s %s", exc.status, exc.code, exc.text)
                return
    channel_id = request.get("channel")
    if channel_id is None:
        log.warning("an interaction's answer is ready and there is no channel to answer in")
        return
    await _in_channel(
        client.get_partial_messageable(int(channel_id)),
        str(request["user"]),
        rendered,
        view,
        private=private,
    )


def _on_board(w: DiscordWiring, channel: object) -> bool:
    """Whether a click came from the status board's channel: its answer goes to whoever
    clicked alone (live or finished after a restart), and the board's message is never
    rewritten with it (the board's refresh redraws it)."""
    return w.board_channel is not None and channel is not None and str(channel) == w.board_channel


async def deliver(
    w: DiscordWiring,
    interaction: discord.Interaction[Any],
    reply: Reply,
    *,
    live: bool,
    deferred_private: bool,
    rewrite: bool = False,
) -> None:
    """Put the answer where the person sees it: on the interaction while its token lives,
    in the channel after."""
    private = reply.ephemeral or reply.error
    if rewrite and _on_board(w, interaction.channel_id):
        rewrite, private = False, True  # the board stays the board; the refresh redraws it
    rendered = render(reply.message)
    view = w.view(rendered)
    expired = (
        interaction.is_expired()
        or (discord.utils.utcnow() - interaction.created_at).total_seconds() > TOKEN_LIFE - 30
    )
    if live and not expired:
        try:
            if rewrite:  # the click's own message shows who decided and the outcome
                await interaction.edit_original_response(
                    content=rendered.content,
                    view=view,
                    attachments=_files(rendered),
                    allowed_mentions=NO_MENTIONS,
                )
            elif interaction.type == discord.InteractionType.component:
                await _followup(interaction, rendered, view, private=private)
            elif private == deferred_private:
                await interaction.edit_original_response(
                    content=rendered.content,
                    view=view,
                    attachments=_files(rendered),
                    allowed_mentions=NO_MENTIONS,
                )
            else:  # "thinking…" was shown to the other audience: replace it
                with contextlib.suppress(discord.HTTPException):
                    await interaction.delete_original_response()
                await _followup(interaction, rendered, view, private=private)
            return
        except discord.HTTPException as exc:
            if exc.code not in DEAD_TOKEN and exc.status not in (401, 404):
                log.warning("Discord refused an answer: %s %s %s", exc.status, exc.code, exc.text)
                return
    await in_channel(interaction, rendered, view, private=private)


async def _followup(
    interaction: discord.Interaction[Any],
    rendered: Rendered,
    view: discord.ui.View | None,
    *,
    private: bool,
) -> None:
    await interaction.followup.send(**_followup_kwargs(rendered, view, private=private))


def _followup_kwargs(
    rendered: Rendered, view: discord.ui.View | None, *, private: bool
) -> dict[str, Any]:
    """A follow-up on an interaction's token, from this process's interaction or from
    the token another process wrote down."""
    kwargs: dict[str, Any] = {
        "content": rendered.content,
        "ephemeral": private,
        "allowed_mentions": NO_MENTIONS,
    }
    if view is not None:
        kwargs["view"] = view
    if rendered.attachment is not None:
        kwargs["file"] = discord.File(io.BytesIO(rendered.attachment), filename=ATTACHMENT)
    return kwargs


def only(person: discord.abc.Snowflake) -> discord.AllowedMentions:
    """Mentions that may ping this person and nobody else: a mention of anyone in the
    answer's own text (an alert label, an incident summary) stays silent."""
    return discord.AllowedMentions(everyone=False, users=[person], roles=False, replied_user=False)


async def in_channel(
    interaction: discord.Interaction[Any],
    rendered: Rendered,
    view: discord.ui.View | None,
    *,
    private: bool,
) -> None:
    """The interaction's token is dead: answer in the channel. An answer meant only for
    the person is not shown to everyone; they are told to ask again."""
    channel = interaction.channel
    if channel is None or not isinstance(channel, discord.abc.Messageable):
        log.warning("interaction %s expired and has no channel to answer in", interaction.id)
        return
    await _in_channel(channel, str(interaction.user.id), rendered, view, private=private)


async def _in_channel(
    channel: Any,
    user: str,
    rendered: Rendered,
    view: discord.ui.View | None,
    *,
    private: bool,
) -> None:
    mention = f"<@{user}>"
    try:
        if private:
            await channel.send(
                f"{mention} your answer was ready after Discord stopped taking answers to "
                "that command; ask again to see it.",
                allowed_mentions=only(discord.Object(id=int(user))),
            )
            return
        kwargs: dict[str, Any] = {
            "content": f"{mention} {rendered.content}"[:2000],
            "allowed_mentions": only(discord.Object(id=int(user))),
        }
        if view is not None:
            kwargs["view"] = view
        if rendered.attachment is not None:
            kwargs["file"] = discord.File(io.BytesIO(rendered.attachment), filename=ATTACHMENT)
        await channel.send(**kwargs)
    except discord.HTTPException as exc:
        log.warning("could not answer in channel %s: %s %s", channel.id, exc.status, exc.code)


def _files(rendered: Rendered) -> list[discord.File]:
    if rendered.attachment is None:
        return []
    return [discord.File(io.BytesIO(rendered.attachment), filename=ATTACHMENT)]
