"""Where serve shows the board (services/board/publish.py): each Slack user's App Home,
and a Discord channel's status message where ``[discord] board_channel`` names one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from services.board import BoardReader
from services.board.publish import BoardPublisher, Surface
from services.changes.kinds import Kinds
from services.config import Config
from services.estate.estate import Estate
from services.notify import FanoutNotifier
from services.reads.gate import ReadGate
from services.reads.service import QueueReads


def chat_configured(config: Config) -> bool:
    """Whether a chat platform is configured, so alerts stored now reach people (posted by
    the serving process, even when this one is a one-shot command)."""
    env = config.env
    return env.slack_bot_token is not None or env.discord_bot_token is not None


def board_services(  # noqa: PLR0917 - one call site, every value in its place
    engine: AsyncEngine,
    estate: Estate,
    reads: QueueReads | None,
    kinds: Kinds,
    clock: Callable[[], datetime],
    boards: bool,
    surfaces: Sequence[Surface],
) -> tuple[BoardReader, BoardPublisher | None]:
    """The board's reader, and its publisher where the board is shown somewhere
    (``boards``: a Slack App Home or a Discord status message, so every change asks for a
    refresh) or by this process (``surfaces``: it delivers the refreshes)."""
    reader = BoardReader(engine, reads or QueueReads(estate, gate=ReadGate()), kinds, clock)
    if not (boards or surfaces):
        return reader, None
    return reader, BoardPublisher(engine=engine, reader=reader, clock=clock, surfaces=surfaces)


def boards_shown(config: Config) -> bool:
    """Whether the board is shown anywhere, so every change asks for its refresh: Slack App
    Homes (a bot token Slack can send events to, not posting only) or a Discord status
    message (``[discord] board_channel``, with a bot token)."""
    env, file = config.env, config.file
    slack = env.slack_bot_token is not None and not file.slack.posting_only
    discord = env.discord_bot_token is not None and file.discord.board_channel is not None
    return slack or discord


def board_surfaces(config: Config, posts: FanoutNotifier | None) -> list[Surface]:
    """The board's surfaces over the notifiers serve posts with (their connections and
    login are shared, and closed with them)."""
    surfaces: list[Surface] = []
    if posts is None or not boards_shown(config):
        return surfaces
    from bot.slack.notifier import SlackNotifier

    slack = posts.on("slack")
    if isinstance(slack, SlackNotifier) and not config.file.slack.posting_only:
        from bot.slack.home import SlackHome

        surfaces.append(SlackHome(slack.client))
    channel = config.file.discord.board_channel
    discord = posts.on("discord")
    if discord is not None and channel is not None:
        from bot.discord.board import DiscordBoard
        from bot.discord.notifier import DiscordNotifier

        if isinstance(discord, DiscordNotifier):
            surfaces.append(DiscordBoard(discord, channel))
    return surfaces
