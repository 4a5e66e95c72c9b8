"""The notifier port on Discord: channel messages, threads and edits through discord.py.

Channel names come from ``[channels.NAME] discord = "..."``; a name with no Discord id
is skipped. A post into a thread names the message the thread hangs from: the first one
starts the thread from that message (``POST .../messages/{id}/threads``; in Discord a
thread started from a message has the message's id), later ones go straight into it.
Rate limits (429) are waited out by discord.py's HTTP client, which retries the call.
The client is attached once serve has built it; until it has logged in, a post raises
``Unavailable`` and the outbox tries again later.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Callable

import discord

from bot.discord.buttons import view_for
from bot.discord.render import ATTACHMENT, Rendered, render
from services.errors import Unavailable
from services.message import Message
from services.notify import ChannelRef, MessageRef

log = logging.getLogger("queuebot.discord")
THREAD_NAME = 100  # characters of a thread's name at most
ALREADY_A_THREAD = 160004  # Discord: "A thread has already been created for this message"


def allowed(rendered: Rendered) -> discord.AllowedMentions:
    """Who a post may ping: the people and roles its own mentions call, nobody else
    (never @everyone or @here, whatever its text holds)."""
    if not (rendered.users or rendered.roles):
        return discord.AllowedMentions.none()
    return discord.AllowedMentions(
        everyone=False,
        users=[discord.Object(id=int(u)) for u in rendered.users] or False,
        roles=[discord.Object(id=int(r)) for r in rendered.roles] or False,
        replied_user=False,
    )


class DiscordNotifier:
    """``login``: for a process without the gateway (serve's worker), a plain client that
    only logs in over REST, made on the first post (and again after a failed attempt)."""

    def __init__(
        self,
        channels: dict[str, str],
        *,
        login: Callable[[], Awaitable[discord.Client]] | None = None,
    ) -> None:
        self.channels = channels
        self.client: discord.Client | None = None
        self._login = login
        self._threads: set[str] = set()  # messages known to have a thread

    def attach(self, client: discord.Client) -> None:
        self.client = client

    async def ready(self) -> discord.Client:
        """The client to post with, logged in (``Unavailable`` until it is)."""
        return await self._ready()

    async def _ready(self) -> discord.Client:
        if self.client is None and self._login is not None:
            try:
                self.client = await self._login()
            except (discord.HTTPException, discord.LoginFailure, OSError) as exc:
                raise Unavailable(f"cannot log in to Discord to post: {exc}") from exc
        client = self.client
        if client is None or client.user is None:
            raise Unavailable("Discord is not connected yet; the post is tried again")
        return client

    async def close(self) -> None:
        """Close the client this notifier logged in itself (not one attached to it)."""
        if self._login is not None and self.client is not None:
            await self.client.close()

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        if thread is not None:
            target: str | None = thread.thread_id
        elif isinstance(channel, ChannelRef):
            target = channel.channel if channel.platform == "discord" else None
        else:
            target = self.channels.get(channel)
        if thread is None and target is None:
            return []
        client = await self._ready()
        if thread is not None and target is None:
            target = await self._thread_of(client, thread, message)
        assert target is not None
        rendered = render(message)
        view = view_for(rendered)
        files = (
            [discord.File(io.BytesIO(rendered.attachment), filename=ATTACHMENT)]
            if rendered.attachment is not None
            else []
        )
        where = client.get_partial_messageable(int(target))
        quiet = allowed(rendered)
        try:
            if view is not None:
                sent = await where.send(
                    rendered.content, allowed_mentions=quiet, files=files, view=view
                )
            else:
                sent = await where.send(rendered.content, allowed_mentions=quiet, files=files)
        except discord.HTTPException as exc:
            raise Unavailable(
                f"Discord refused a message to channel {target}: {exc.status} {exc.text[:200]}"
            ) from exc
        in_thread = target if thread is not None else None
        return [MessageRef("discord", target, str(sent.id), in_thread)]

    async def _thread_of(self, client: discord.Client, root: MessageRef, message: Message) -> str:
        """The thread hanging from ``root``, started now if it is not there yet."""
        key = root.message_id
        if key in self._threads:
            return key
        name = (message.summary or "queuebot").splitlines()[0][:THREAD_NAME] or "queuebot"
        try:
            await client.http.start_thread_with_message(
                int(root.channel), int(root.message_id), name=name, auto_archive_duration=1440
            )
        except discord.HTTPException as exc:
            if exc.code != ALREADY_A_THREAD:
                raise Unavailable(
                    f"Discord refused a thread on message {root.message_id}: "
                    f"{exc.status} {exc.text[:200]}"
                ) from exc
        self._threads.add(key)
        return key  # a thread started from a message has the message's id

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        client = await self._ready()
        rendered = render(message)
        attachments = (
            [discord.File(io.BytesIO(rendered.attachment), filename=ATTACHMENT)]
            if rendered.attachment is not None
            else []
        )
        try:
            await (
                client.get_partial_messageable(int(ref.channel))
                .get_partial_message(int(ref.message_id))
                .edit(
                    content=rendered.content,
                    view=view_for(rendered),
                    attachments=attachments,
                    allowed_mentions=discord.AllowedMentions.none(),
                )
            )
        except discord.HTTPException as exc:
            raise Unavailable(
                f"Discord refused to update message {ref.message_id}: {exc.status} {exc.text[:200]}"
            ) from exc
