"""Building the Discord client for ``queuebot serve`` from the settings: nothing when
DISCORD_BOT_TOKEN is not set, and then discord.py is not even imported (it is a third of
serve's start-up imports, paid by every serve and every serve worker that has no use for
it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.config import Config

if TYPE_CHECKING:
    from bot.bootstrap import App
    from bot.discord.client import DiscordLink
    from bot.discord.commands import Choices
    from bot.discord.notifier import DiscordNotifier


def choices_for(app: App) -> Choices:
    """The values Discord offers as choices. Its choices are one list per option for
    every queue, so ``failure-reason`` offers the reasons of all the configured queues
    (docs/decisions.md, Discord)."""
    from bot.discord.commands import Choices

    shelf = app.router.deps.runbooks
    runbooks = shelf.all() if shelf is not None else []
    return Choices(
        audiences=sorted({c.audience for r in runbooks for c in r.communications}),
        scenarios=[r.scenario_id for r in runbooks],
        failure_reasons=app.estate.failure_reasons(),  # every configured queue's
    )


def discord_notifier(config: Config, *, rest_only: bool = False) -> DiscordNotifier | None:
    """Where alerts, incidents and plans post on Discord: ``[channels.NAME] discord``.
    In serve's process the gateway client is attached once it is built; ``rest_only``
    (serve's worker, which has no gateway) logs a plain client in over REST instead."""
    token = config.env.discord_bot_token
    if token is None:
        return None
    import discord

    from bot.discord.client import point_at
    from bot.discord.notifier import DiscordNotifier

    channels = {name: c.discord for name, c in config.file.channels.items() if c.discord}
    if not rest_only:
        return DiscordNotifier(channels)
    base = config.env.discord_api_base_url

    async def login() -> discord.Client:
        point_at(base)
        client = discord.Client(
            intents=discord.Intents.none(), allowed_mentions=discord.AllowedMentions.none()
        )
        try:
            await client.login(token.get_secret_value())
        except BaseException:
            await client.close()
            raise
        return client

    return DiscordNotifier(channels, login=login)


def discord_link(config: Config, app: App) -> DiscordLink | None:
    token = config.env.discord_bot_token
    if token is None:
        return None
    from bot.discord.client import DEFAULT_API, DiscordLink, QueuebotClient, point_at
    from bot.discord.interactions import DiscordWiring

    base = config.env.discord_api_base_url
    point_at(base)
    wiring = DiscordWiring(
        router=app.router,
        directory=app.directory,
        ledger=app.ledger,
        metrics=app.metrics,
        board_channel=config.file.discord.board_channel,
    )
    guild = config.file.discord.guild
    # Discord roles named under [rotas], [roles] or [teams]: read with the guild's members
    wanted = config.file.discord.read_members and discord_roles(config)
    membership = app.standings.membership if app.standings and wanted else None
    client = QueuebotClient(
        wiring,
        choices=choices_for(app),
        guild=guild,
        ask_gateway=base.rstrip("/") != DEFAULT_API,
        membership=membership,
    )
    if membership is not None and guild is not None:
        from bot.discord.members import DiscordRoles

        membership.add_reader("discord", DiscordRoles(client, guild))
    return DiscordLink(client, token.get_secret_value())


def discord_roles(config: Config) -> bool:
    """Whether any Discord role grants a role, a rota or a team."""
    file = config.file
    grants = [*file.role_grants().values(), *file.teams.values()]
    return any(g.discord_roles for g in grants) or any(r.discord_role for r in file.rotas.values())
