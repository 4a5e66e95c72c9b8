"""The Discord client inside ``queuebot serve``: the gateway connection, the app-command
groups, the buttons that survive restarts, and the one error boundary of the tree.

Where it connects: ``DISCORD_API_BASE_URL`` is set on discord.py's ``Route.BASE`` before
login. When that variable is set, the gateway's address is asked of that base
(``GET /gateway/bot``) in ``setup_hook`` and set as ``DiscordWebSocket.DEFAULT_GATEWAY``:
left alone, discord.py dials Discord's own gateway and never asks, so a local fake could
serve REST but never the gateway. discord.py's HTTP client honours 429s (it waits out
``retry_after``); queuebot sets no ``max_ratelimit_timeout`` so no wait is cut short.

A missing or rejected token is one line and the client stops trying (a token does not
become right by itself); /readyz says so until a restart with a good one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket
from discord.http import Route

from bot.discord import buttons, forms
from bot.discord.commands import Choices, groups
from bot.discord.interactions import DiscordWiring
from bot.discord.members import member_changed
from commands import messages
from commands.context import new_correlation_id
from services.access import Membership
from services.errors import QueuebotError

log = logging.getLogger("queuebot.discord")
DEFAULT_API = "https://discord.com/api/v10"


def point_at(api_base_url: str) -> None:
    """Every REST call discord.py makes (webhooks and interaction callbacks included) is
    built on ``Route.BASE``, a class attribute: this process talks to one Discord."""
    Route.BASE = api_base_url.rstrip("/")


class Tree(app_commands.CommandTree[Any]):
    async def on_error(
        self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        """The one error boundary of the app commands: what the person can fix gets a
        clear private answer; anything else is logged with its traceback and answered
        with the correlation id that finds it in the log."""
        correlation_id = new_correlation_id()
        cause = error.__cause__ if isinstance(error, app_commands.CommandInvokeError) else error
        if isinstance(cause, QueuebotError):
            text = messages.error_reply(cause).message.summary
        elif isinstance(error, app_commands.CommandNotFound):
            text = (
                f"queuebot has no command /{' '.join([*error.parents, error.name])}; its "
                "commands are /queue and /incident (try /queue help). Discord may still "
                "show commands from before the last restart for a minute."
            )
        elif isinstance(
            error, app_commands.CommandSignatureMismatch | app_commands.TransformerError
        ):
            text = (
                "this command's options do not match what queuebot registered (Discord "
                "still shows an older version); try again in a minute."
            )
        else:
            log.error(
                "unexpected error [%s] in Discord interaction %s",
                correlation_id,
                interaction.id,
                exc_info=error,
            )
            text = messages.unexpected_reply(correlation_id).message.summary
        await _private_answer(interaction, text[:2000])


async def _private_answer(interaction: discord.Interaction[Any], text: str) -> None:
    try:
        if interaction.response.is_done():
            await interaction.followup.send(text, ephemeral=True)
        else:
            await interaction.response.send_message(text, ephemeral=True)
    except discord.HTTPException as exc:
        log.warning("could not answer interaction %s: %s %s", interaction.id, exc.status, exc.code)


class QueuebotClient(discord.Client):
    """discord.py's client with queuebot's wiring: built once in serve, given its
    dependencies through the constructor; ``setup_hook`` does the start-up work."""

    def __init__(
        self,
        wiring: DiscordWiring,
        *,
        choices: Choices,
        guild: str | None,
        ask_gateway: bool,
        membership: Membership | None = None,
        **options: Any,
    ) -> None:
        # Nothing queuebot sends pings anyone unless the send says whom (interactions.py)
        options.setdefault("allowed_mentions", discord.AllowedMentions.none())
        # Discord roles granting roles, rotas or teams: their members are read over REST
        # and read again on member events, which take the privileged Server Members intent
        members = membership is not None
        if members:
            options.setdefault("chunk_guilds_at_startup", False)
        super().__init__(intents=discord.Intents(guilds=True, members=members), **options)
        self.membership = membership
        self.wiring = wiring
        self.wiring.view = buttons.view_for
        self.wiring.client = self  # answers for interactions another process deferred
        self.guild_id = guild
        self.ask_gateway = ask_gateway
        self.tree = Tree(self)
        for group in groups(choices):
            self.tree.add_command(group)
        self.tree.add_command(forms.context_menu())  # a message's "Declare incident"
        self.failure: str | None = "not connected yet"
        self.synced: str | None = None

    async def setup_hook(self) -> None:
        if self.ask_gateway:
            _, url, _ = await self.http.get_bot_gateway()
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
            log.info("Discord gateway from %s/gateway/bot: %s", Route.BASE, url)
        self.add_dynamic_items(*buttons.DYNAMIC_ITEMS)
        if self.guild_id is not None:
            guild = discord.Object(id=int(self.guild_id))
            self.tree.copy_global_to(guild=guild)
            self.tree.clear_commands(guild=None)
            synced = await self.tree.sync(guild=guild)
            where = f"guild {self.guild_id}"
        else:
            synced = await self.tree.sync()
            where = "every guild (global commands can take up to an hour to appear)"
        self.synced = where
        log.info("Discord commands synced to %s: %s", where, ", ".join(c.name for c in synced))

    async def on_socket_event_type(self, event: str) -> None:
        """Each gateway event's type, as it arrives: queuebot caches no members, and
        discord.py dispatches no member update for a member it does not cache."""
        if self.membership is not None:
            member_changed(event, self.membership)

    async def on_ready(self) -> None:
        self.failure = None
        log.info("Discord gateway ready as %s", self.user)

    async def on_disconnect(self) -> None:
        if self.failure is None:
            self.failure = "the gateway connection dropped; reconnecting"

    async def on_resumed(self) -> None:
        self.failure = None

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        """A form submitted (bot/discord/forms.py), and its "Open the form again"; a click
        on a button no dynamic item takes would otherwise get no answer at all (Discord
        would say "interaction failed"): say that nothing was done."""
        if interaction.type == discord.InteractionType.modal_submit:
            await forms.on_submitted(interaction)  # a queuebot form, read by any process
            return
        if interaction.type != discord.InteractionType.component:
            return
        data: dict[str, Any] = dict(interaction.data or {})
        custom_id = str(data.get("custom_id", ""))
        if forms.AGAIN.fullmatch(custom_id):
            await forms.reopen(interaction, custom_id)
        elif not buttons.is_ours(custom_id):
            log.info("a click on an unknown button %r, answered", custom_id[:100])
            await buttons.answer_unknown(interaction, custom_id)

    def problem(self) -> str | None:
        """For /readyz: why the gateway cannot work, or None while it holds."""
        if self.failure is not None:
            return self.failure
        if self.is_closed():
            return "the client is closed"
        if self.ws is None or not self.is_ready():
            return "the gateway is reconnecting"
        return None


class DiscordLink:
    """Runs the client beside the HTTP app: logs in and connects in a task of its own,
    turning a missing or rejected token into one line instead of a retry loop."""

    def __init__(self, client: QueuebotClient, token: str) -> None:
        self.client = client
        self.token = token
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            await self.client.start(self.token, reconnect=True)
        except discord.LoginFailure:
            self._stop(
                "Discord rejected DISCORD_BOT_TOKEN (401): check the bot token on the "
                "application's Bot page"
            )
        except discord.PrivilegedIntentsRequired:
            self._stop(
                "Discord refused the gateway: the bot asks for an intent the "
                "application has not enabled (with Discord roles under [rotas], [roles] or "
                "[teams], the Server Members intent, on the application's Bot page)"
            )
        except discord.GatewayNotFound:
            self._stop(f"Discord's gateway address could not be asked of {Route.BASE}")
        except discord.ConnectionClosed as exc:
            if exc.code == 4004:
                self._stop(
                    "Discord rejected DISCORD_BOT_TOKEN on the gateway (4004): check the bot token"
                )
            else:
                self._stop(f"Discord closed the gateway with code {exc.code}")
        except discord.Forbidden as exc:
            guild = self.client.guild_id
            self._stop(
                f"Discord refused queuebot's commands (403 {exc.text[:120]}): "
                + (
                    f"is the bot in guild {guild}, invited with the applications.commands scope?"
                    if guild
                    else "was the bot invited with the applications.commands scope?"
                )
            )
        except discord.HTTPException as exc:
            self._stop(f"Discord answered {exc.status} at start-up: {exc.text[:200]}")
        except (TimeoutError, OSError) as exc:
            self._stop(f"Discord cannot be reached at {Route.BASE} ({type(exc).__name__})")

    def _stop(self, why: str) -> None:
        self.client.failure = why
        log.error("Discord off: %s", why)

    def problem(self) -> str | None:
        return self.client.problem()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
