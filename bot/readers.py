"""The platforms' readers of group membership, attached to the app's ``Standings``
where a token lets queuebot read them (docs/access.md). Imported lazily: a process with
no Slack token never imports the Slack SDK for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.config import Config

if TYPE_CHECKING:
    from bot.bootstrap import App


def attach_slack_reader(config: Config, app: App) -> bool:
    """Read Slack user groups with the bot token; False when there is none."""
    if config.env.slack_bot_token is None or app.standings is None:
        return False
    from bot.slack.app import web_client
    from bot.slack.members import SlackGroups

    app.standings.membership.add_reader("slack", SlackGroups(web_client(config.env)))
    return True
