"""The notifier port on Slack: chat.postMessage and chat.update through the Web client.

Channel names come from ``[channels.NAME] slack = "C..."``; a name with no Slack id is
skipped. The client's rate-limit handler honours 429 Retry-After (about one message per
second per channel).
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.render import blocks, fallback_text
from services.errors import Unavailable
from services.message import Message
from services.notify import ChannelRef, MessageRef


class SlackNotifier:
    def __init__(self, client: AsyncWebClient, channels: dict[str, str]) -> None:
        self.client = client
        self.channels = channels

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        if thread is not None:
            target: str | None = thread.channel
        elif isinstance(channel, ChannelRef):
            target = channel.channel if channel.platform == "slack" else None
        else:
            target = self.channels.get(channel)
        if target is None:
            return []
        thread_ts = (thread.thread_id or thread.message_id) if thread else None
        try:
            sent = await self.client.chat_postMessage(
                channel=target,
                text=fallback_text(message),
                blocks=blocks(message),
                thread_ts=thread_ts,
            )
        except SlackApiError as exc:
            raise Unavailable(
                f"Slack refused a message to {target}: {exc.response.get('error', 'unknown error')}"
            ) from exc
        return [MessageRef("slack", target, str(sent["ts"]), thread_ts)]

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        try:
            await self.client.chat_update(
                channel=ref.channel,
                ts=ref.message_id,
                text=fallback_text(message),
                blocks=blocks(message),
            )
        except SlackApiError as exc:
            raise Unavailable(
                f"Slack refused to update message {ref.message_id}: "
                f"{exc.response.get('error', 'unknown error')}"
            ) from exc
