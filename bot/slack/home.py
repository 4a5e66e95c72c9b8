"""queuebot's App Home on Slack: each person who opens it (the ``app_home_opened`` event)
sees their own board there, kept current by the board's refreshes
(services/board/publish.py) through ``views.publish``. Its Approve and Reject buttons
are the request messages' own (``cr:approve:N``), so a click goes the way every click
goes (bot/slack/listeners.py); its answer, having no response_url in a Home tab, comes in
the app's Messages tab."""

from __future__ import annotations

import logging
import re
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.render import blocks
from services.board.publish import BoardPublisher
from services.board.shown import Place
from services.errors import DatabaseUnavailable, Unavailable
from services.message import Message

log = logging.getLogger("queuebot.slack")
MAX_VIEW_BLOCKS = 100  # a Home tab's blocks at most
_USER = re.compile(r"[UW][A-Z0-9]{2,30}")  # a Slack user id


def home_view(message: Message) -> dict[str, Any]:
    """The Home tab showing ``message`` (a board: at most 44 blocks, well within 100)."""
    return {"type": "home", "blocks": blocks(message, most=MAX_VIEW_BLOCKS)}


class SlackHome:
    """The board's surface on Slack: each person's own board in their App Home."""

    platform = "slack"
    channel: str | None = None  # each person their own

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def show(self, place: Place, message: Message) -> str | None:
        try:
            await self.client.views_publish(user_id=place.account, view=home_view(message))
        except SlackApiError as exc:
            raise Unavailable(f"Slack answered {exc.response.get('error') or 'an error'}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unavailable(f"Slack cannot be reached ({type(exc).__name__})") from exc
        return None


def register_home(app: AsyncApp, boards: BoardPublisher | None) -> None:
    """Whoever opens the App Home is kept current from then on (for ``SEEN_WITHIN``) and
    shown their board at once."""
    if boards is None:
        return

    async def opened(event: dict[str, Any]) -> None:
        user, tab = event.get("user"), event.get("tab")
        if tab not in (None, "home") or not isinstance(user, str) or not _USER.fullmatch(user):
            return  # the Messages tab, or an event of a shape Slack never sends
        try:
            await boards.opened(platform="slack", account=user)
        except DatabaseUnavailable as exc:
            log.warning("could not show the App Home of %s: %s", user, exc.message)

    app.event("app_home_opened")(opened)
