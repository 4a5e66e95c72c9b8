"""Answering one Discord interaction: within Discord's 3 seconds, once, through the one
error boundary.

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

import asyncio
import contextlib
import io
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import discord

from bot.boundary import answer
from bot.discord.render import ATTACHMENT, Rendered, render
from commands.context import Invocation, new_correlation_id
from commands.model import Approve, Command, Reject
from commands.reply import Reply
from commands.router import Router
from services.ledger import HEARTBEAT, Claim, DeliveryLedger
from services.people import Directory

log = logging.getLogger("queuebot.discord")
TOKEN_LIFE = 15 * 60.0  # seconds an interaction's token can answer
NO_MENTIONS = discord.AllowedMentions.none()
# What Discord answers for a token that is dead: unknown interaction, unknown webhook,
# invalid webhook token.
DEAD_TOKEN = {10062, 10015, 50027}

ViewFactory = Callable[[Rendered], discord.ui.View | None]


@dataclass
class DiscordWiring:
    router: Router
    directory: Directory
    ledger: DeliveryLedger
    view: ViewFactory = lambda rendered: None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Keep a strong reference to work started after the first response."""
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self, grace: float = 10.0) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=grace)


def invocation(w: DiscordWiring, interaction: discord.Interaction[Any]) -> Invocation:
    account = str(interaction.user.id)
    channel = interaction.channel_id
    return Invocation(
        person=w.directory.by_account("discord", account),
        platform="discord",
        account=account,
        channel=str(channel) if channel is not None else None,
        correlation_id=new_correlation_id(),
    )


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


async def run_command(
    w: DiscordWiring,
    interaction: discord.Interaction[Any],
    command: Callable[[], Command],
    *,
    private: bool,
    where: str,
) -> None:
    """Answer a slash command or a click: defer, run the command once, then answer."""
    live = await first_response(interaction, private=private)
    inv = invocation(w, interaction)
    claim: Claim | None = None
    decided: list[Command] = []

    async def run() -> Reply | None:
        nonlocal claim
        built = command()  # a UsageError here is the boundary's to say
        decided.append(built)
        claim = await w.ledger.claim(f"discord:interaction:{interaction.id}")
        if claim is None:
            log.info("interaction %s acted on already, ignored", interaction.id)
            return None
        beating = asyncio.create_task(_keep_fresh(w.ledger, claim))
        try:
            return await w.router.handle(built, replace(inv, delivery=claim))
        finally:
            beating.cancel()

    reply = await answer(run(), correlation_id=inv.correlation_id, where=where)
    try:
        if reply is not None:
            rewrite = (
                bool(decided)
                and isinstance(decided[0], Approve | Reject)
                and not reply.error
                and interaction.type == discord.InteractionType.component
            )
            await deliver(
                w, interaction, reply, live=live, deferred_private=private, rewrite=rewrite
            )
    finally:
        if claim is not None:
            await answer(w.ledger.finish(claim), correlation_id=inv.correlation_id, where=where)


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
    kwargs: dict[str, Any] = {
        "content": rendered.content,
        "ephemeral": private,
        "allowed_mentions": NO_MENTIONS,
    }
    if view is not None:
        kwargs["view"] = view
    if rendered.attachment is not None:
        kwargs["file"] = discord.File(io.BytesIO(rendered.attachment), filename=ATTACHMENT)
    await interaction.followup.send(**kwargs)


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
    mention = f"<@{interaction.user.id}>"
    try:
        if private:
            await channel.send(
                f"{mention} your answer was ready after Discord stopped taking answers to "
                "that command; ask again to see it.",
                allowed_mentions=only(interaction.user),
            )
            return
        kwargs: dict[str, Any] = {
            "content": f"{mention} {rendered.content}"[:2000],
            "allowed_mentions": only(interaction.user),
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


async def _keep_fresh(ledger: DeliveryLedger, claim: Claim) -> None:
    """Refresh the claim while its work runs, so that only a dead owner's goes stale."""
    while True:
        await asyncio.sleep(HEARTBEAT)
        try:
            if not await ledger.heartbeat(claim):
                return
        except Exception:  # the database is away; the work will say so
            log.debug("could not refresh the claim on %s", claim.key)
