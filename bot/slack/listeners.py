"""Slack listeners: slash commands and buttons, each two small translations.

Every request is acknowledged first, by the ``ack_at_once`` listener middleware (Slack gives
up after 3 s and Bolt answers 404 when ack is late). Before that, ``accepting`` reads what
Slack sent into a delivery (bot/slack/payloads.py: a payload queuebot cannot act on or
answer is refused with 400) and writes it down in the ledger. The listener then hands the
delivery to a task that runs the one delivery protocol (bot/delivery.py) and answers
through ``response_url``, or in the channel once Slack no longer takes answers there.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

import aiohttp
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.delivery import Deliveries, Work, WrittenDown
from bot.ratelimited_log import RateLimitedLog
from bot.slack.home import register_home
from bot.slack.members import register_group_events
from bot.slack.payloads import (
    Delivery,
    Malformed,
    UnknownButton,
    button_click,
    command_delivery,
    delivery_of,
    request_of,
)
from bot.slack.render import blocks, fallback_text
from commands import messages
from commands.parser import GROUPS
from commands.reply import Reply
from services.access import Membership
from services.board.publish import BoardPublisher
from services.button_ids import DRAWN
from services.ledger import Orphan

log = logging.getLogger("queuebot.slack")

ACCEPTED = "queuebot_accepted"  # where ``accepting`` leaves the delivery in Bolt's context
# Slack takes answers at a response_url for 30 minutes; one later goes to the channel.
RESPONSE_URL_LIFE = timedelta(minutes=29)
InChannel = Callable[[str, str, Reply], Awaitable[None]]
ToPerson = Callable[[str, Reply], Awaitable[None]]
OpenView = Callable[[str, dict[str, Any]], Awaitable[str | None]]


@dataclass
class SlackWiring(Deliveries):
    """The delivery protocol with Slack's edges: answers at a response_url over one shared
    HTTP session, or in the channel once Slack no longer takes them there."""

    platform: ClassVar[str] = "slack"
    # Where Slack's Web API is (SLACK_API_BASE_URL): answers may also go to its origin
    slack_api_base_url: str = "https://slack.com/api/"
    session: aiohttp.ClientSession | None = None
    # posts an answer in a channel, mentioning the person (set where Slack's Web API is)
    in_channel: InChannel | None = None
    # group membership, read again when Slack says a user group changed (members.py)
    membership: Membership | None = None
    # answers in a person's Messages tab with the app (a click in the App Home has no
    # response_url), and the boards their App Home shows (home.py)
    to_person: ToPerson | None = None
    boards: BoardPublisher | None = None
    # opens a modal at a trigger_id: None once opened, else why not (set where Slack's
    # Web API is; bot/slack/forms.py)
    open_view: OpenView | None = None
    refused: RateLimitedLog = field(
        default_factory=lambda: RateLimitedLog(log, what="malformed Slack payloads refused")
    )

    async def answer(self, response_url: str, body: dict[str, Any]) -> None:
        """Post to a response_url over one shared HTTP session (keep-alive), retrying
        connection errors and Slack's 500/503 answers, and honouring 429 Retry-After. A
        retried answer may in rare cases show twice; a lost one would leave the person
        with nothing."""
        if not response_url:
            log.warning("a Slack request carried no response_url; the answer is dropped")
            return
        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession()
        client = AsyncWebhookClient(
            url=response_url,
            session=self.session,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(max_retry_count=2),
                AsyncRateLimitErrorRetryHandler(max_retry_count=3),
                AsyncServerErrorRetryHandler(max_retry_count=2),
            ],
        )
        try:
            sent = await client.send_dict(body)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            # after its retries: one line, not an exception nobody retrieves from the task
            log.warning(
                "could not deliver an answer to %s: %s %s",
                _host(response_url),
                type(exc).__name__,
                exc,
            )
            return
        if sent.status_code >= 400:
            log.warning("Slack refused an answer: HTTP %s %s", sent.status_code, sent.body)

    async def answer_late(
        self, d: Delivery, reply: Reply, *, acked_at: datetime | None, rewrite: bool
    ) -> None:
        """Answer at the delivery's response_url while Slack takes answers there; past
        that (work finished by another process long after the ack), in the channel,
        mentioning the person."""
        if not d.response_url and self.to_person is not None:  # a click in the App Home
            await self.to_person(d.user, reply)
            return
        late = acked_at is not None and self.ledger.clock() - acked_at >= RESPONSE_URL_LIFE
        if late and self.in_channel is not None and d.channel is not None:
            await self.in_channel(d.channel, d.user, reply)
            return
        await self.answer(d.response_url, payload(reply, replace_original=rewrite))

    def work(self, d: Delivery) -> Work:
        return Work(d.key, d.where, self.invocation(d.user, d.channel, d.thread), d.asked)

    async def drain(self, grace: float = 10.0) -> None:
        """Let answers already started finish (on shutdown), then close the session."""
        await super().drain(grace)
        if self.session is not None:
            await self.session.close()


def payload(reply: Reply, *, replace_original: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": fallback_text(reply.message),
        "blocks": blocks(reply.message),
        "replace_original": replace_original,
    }
    if not replace_original:
        body["response_type"] = "ephemeral" if reply.ephemeral or reply.error else "in_channel"
    return body


async def ack_at_once(ack: AsyncAck, next: Callable[[], Awaitable[None]]) -> None:
    """Acknowledge before the listener runs. Bolt (process_before_response=False) starts
    the listener as a task and then polls every 10 ms until it has called ack(); an ack
    already given here skips that poll, so Slack gets its 200 as soon as the request is
    verified and matched, however busy the event loop is with earlier answers."""
    await ack()
    await next()


def register(app: AsyncApp, w: SlackWiring) -> None:
    for group in GROUPS:
        read_command = functools.partial(command_delivery, group=group)
        app.command(f"/{group}", middleware=[accepting(w, read_command), ack_at_once])(_listener(w))
    app.action(DRAWN, middleware=[accepting(w, button_click), ack_at_once])(_listener(w))
    from bot.slack.forms import register_forms  # forms builds on this module

    register_forms(app, w)
    membership = getattr(w, "membership", None)  # a test builds the app with no wiring
    if membership is not None:
        register_group_events(app, membership)
    register_home(app, getattr(w, "boards", None))


def accepting(
    w: SlackWiring, read: Callable[..., Delivery | UnknownButton]
) -> Callable[..., Awaitable[BoltResponse | None]]:
    """A listener middleware that reads the payload before the ack: one ``read`` refuses
    is answered 400 (one rate-limited log line) and goes no further; otherwise the
    delivery, written down in the ledger, waits in Bolt's context for the listener."""

    async def accept(
        body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        try:
            accepted = read(body, slack_api=w.slack_api_base_url)
        except Malformed as exc:
            w.refused("refused a signed Slack payload with 400: %s", exc)
            return BoltResponse(status=400, body=f"malformed Slack request: {exc}\n")
        if isinstance(accepted, Delivery):
            context[ACCEPTED] = (accepted, await w.write_down(accepted.key, request_of(accepted)))
        else:
            context[ACCEPTED] = accepted
        await next()
        return None

    return accept


def _listener(w: SlackWiring) -> Any:
    async def on_accepted(context: AsyncBoltContext) -> None:  # acked already: ack_at_once
        accepted: UnknownButton | tuple[Delivery, WrittenDown] = context[ACCEPTED]
        if isinstance(accepted, UnknownButton):
            reply = messages.unknown_button(accepted.action_id)
            w.spawn(w.answer(accepted.response_url, payload(reply)))
            return
        delivery, written = accepted
        if written.repeated:
            w.ignored(delivery.key)
        else:  # claimed before the ack, or (the database away) not recorded: said so
            w.spawn(handle_delivery(w, delivery, written))

    return on_accepted


def _host(url: str) -> str:
    """Where an answer goes, for the log: host and port only (a response_url's path is
    what lets anyone post to the conversation)."""
    try:
        parts = urlsplit(url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    except ValueError:
        return "an unreadable URL"


async def handle_delivery(w: SlackWiring, d: Delivery, written: WrittenDown) -> None:
    """Run one delivery this process acknowledged (bot/delivery.py) and answer it at its
    response_url; a successful click on a decision rewrites the request's own message
    (who approved, the result)."""

    from bot.slack.forms import open_form_if_asked  # forms builds on this module

    if await open_form_if_asked(w, d, written):
        return

    async def answer_here(reply: Reply, rewrite: bool) -> None:
        await w.answer_late(d, reply, acked_at=d.since, rewrite=rewrite)

    await w.take(w.work(d), written, answer_here)


async def resume(w: SlackWiring, orphan: Orphan) -> None:
    """Finish a delivery another process acknowledged and died on; the answer goes to
    the response_url while Slack takes answers there, to the channel after."""
    d = delivery_of(orphan.claim.key, orphan.request)

    async def answer_here(reply: Reply, rewrite: bool) -> None:
        acked_at = d.since or orphan.acked_at  # a form's: when its command was given
        await w.answer_late(d, reply, acked_at=acked_at, rewrite=rewrite)

    await w.resume(w.work(d), orphan, answer_here)
