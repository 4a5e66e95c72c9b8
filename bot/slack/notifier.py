"""The notifier port on Slack: chat.postMessage and chat.update through the Web client.

Channel names come from ``[channels.NAME] slack = "C..."``; a name with no Slack id is
skipped. Posts to one channel are spaced about a second apart (Slack's pace per channel);
the client's rate-limit handler honours a 429's Retry-After all the same.
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.pacing import ChannelPacer
from bot.slack.render import blocks, fallback_text
from services.errors import Unavailable
from services.message import Actions, Message
from services.notify import ChannelRef, MessageRef


class SlackNotifier:
    def __init__(
        self,
        client: AsyncWebClient,
        channels: dict[str, str],
        *,
        pacer: ChannelPacer | None = None,
        buttons: bool = True,
    ) -> None:
        self.client = client
        self.channels = channels
        self.pacer = pacer or ChannelPacer()
        # False when Slack can send nothing back ([slack] posting_only): a button whose
        # click could never arrive is left out rather than shown
        self.buttons = buttons

    def _shown(self, message: Message) -> Message:
        if self.buttons:
            return message
        kept = tuple(block for block in message.blocks if not isinstance(block, Actions))
        return Message(message.summary, kept)

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
            async with self.pacer.turn(target):
                sent = await self.client.chat_postMessage(
                    channel=target,
                    text=fallback_text(message),
                    blocks=blocks(self._shown(message)),
                    thread_ts=thread_ts,
                )
        except SlackApiError as exc:
            raise Unavailable(
                f"Slack refused a message to {target}: {exc.response.get('error', 'unknown error')}"
            ) from exc
        return [MessageRef("slack", target, str(sent["ts"]), thread_ts)]

    async def close(self) -> None:
        """Close the client's kept connections (``PooledWebClient``), where it keeps any."""
        aclose = getattr(self.client, "aclose", None)
        if aclose is not None:
            await aclose()

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        try:
            await self.client.chat_update(
                channel=ref.channel,
                ts=ref.message_id,
                text=fallback_text(message),
                blocks=blocks(self._shown(message)),
            )
        except SlackApiError as exc:
            raise Unavailable(
                f"Slack refused to update message {ref.message_id}: "
                f"{exc.response.get('error', 'unknown error')}"
            ) from exc
