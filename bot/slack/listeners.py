"""Slack listeners: slash commands and approval buttons, each two small translations.

Every request is acknowledged first, by the ``ack_at_once`` listener middleware (Slack gives
up after 3 s and Bolt answers 404 when ack is late). The listener then hands a plain
delivery to a task, which records it in the ledger so that a retry or a double delivery
does nothing more, runs the command and answers through ``response_url``.

Before that, ``accepting`` reads what Slack sent into that delivery, checking every part
queuebot keeps, answers to or records (a signed request is Slack's, but a payload of a shape
Slack never sends must not become a database error or an answer posted nowhere). A payload
queuebot cannot act on or answer is refused with 400; a button that names no change
request is acknowledged and answered with a clear ephemeral reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
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

from bot.boundary import answer
from bot.ratelimited_log import RateLimitedLog
from bot.slack.render import blocks, fallback_text
from commands import messages
from commands.clicks import command_of, words
from commands.context import Invocation, new_correlation_id
from commands.model import Approve, Command, Reject
from commands.parser import GROUPS
from commands.reply import Reply
from commands.router import Router
from services.button_ids import DRAWN
from services.ledger import CLAIMED, Claim, DeliveryLedger, Orphan
from services.people import Directory

log = logging.getLogger("queuebot.slack")
# a database away refuses every write-down: a few lines a minute say so
unwritten = RateLimitedLog(log, what="deliveries not written down before their ack")

ACCEPTED = "queuebot_accepted"  # where ``accepting`` leaves the delivery in Bolt's context
# Slack takes answers at a response_url for 30 minutes; one later goes to the channel.
RESPONSE_URL_LIFE = timedelta(minutes=29)
InChannel = Callable[[str, str, Reply], Awaitable[None]]
# Slack wants its ack within 3 s: a database that does not answer this soon (a network
# partition, not a refusal) is not waited for. The ack goes out, and the work answers.
# A row written after all is adopted once stale, like any other orphan.
WRITE_DOWN_WITHIN = 1.5


@dataclass(frozen=True)
class Delivery:
    """What an acknowledged request asks: a command's text, or a button's decision."""

    key: str  # for the ledger: what Slack sends that makes this delivery unique
    where: str  # for the error boundary's log
    user: str
    channel: str | None
    response_url: str
    group: str = ""
    text: str = ""
    thread: str | None = None
    decision: Command | None = None  # a button: the command it stands for
    action_id: str = ""  # a button's, from which ``decision`` is read again after a crash


@dataclass(frozen=True)
class UnknownButton:
    """A click on a queuebot button whose id names nothing queuebot can act on."""

    action_id: str
    response_url: str


class Malformed(ValueError):
    """A signed payload queuebot cannot act on or answer; the message says which part."""


@dataclass
class SlackWiring:
    router: Router
    directory: Directory
    ledger: DeliveryLedger
    # Where Slack's Web API is (SLACK_API_BASE_URL): answers may also go to its origin
    slack_api_base_url: str = "https://slack.com/api/"
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    session: aiohttp.ClientSession | None = None
    # posts an answer in a channel, mentioning the person (set where Slack's Web API is)
    in_channel: InChannel | None = None
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
        late = acked_at is not None and self.ledger.clock() - acked_at >= RESPONSE_URL_LIFE
        if late and self.in_channel is not None and d.channel is not None:
            await self.in_channel(d.channel, d.user, reply)
            return
        await self.answer(d.response_url, payload(reply, replace_original=rewrite))

    def dispatch(self, delivery: Delivery) -> None:
        """Answer an acknowledged delivery in a task of its own on this loop."""
        self.spawn(handle_delivery(self, delivery))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run the work after the ack, holding a strong reference: the event loop keeps
        only weak ones, and a task nobody references can vanish mid-flight."""
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self, grace: float = 10.0) -> None:
        """Let answers already started finish (on shutdown), then close the session."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=grace)
        if self.session is not None:
            await self.session.close()


def invocation(
    w: SlackWiring, user: str, channel: str | None, thread: str | None = None
) -> Invocation:
    return Invocation(
        person=w.directory.by_account("slack", user),
        platform="slack",
        account=user,
        channel=channel,
        thread=thread,
        correlation_id=new_correlation_id(),
    )


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


def accepting(
    w: SlackWiring, read: Callable[..., Delivery | UnknownButton]
) -> Callable[..., Awaitable[BoltResponse | None]]:
    """A listener middleware that reads the payload before the ack: one ``read`` refuses
    is answered 400 (one rate-limited log line) and goes no further; otherwise the
    delivery waits in Bolt's context for the listener."""

    async def accept(
        body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        try:
            accepted = read(body, slack_api=w.slack_api_base_url)
        except Malformed as exc:
            w.refused("refused a signed Slack payload with 400: %s", exc)
            return BoltResponse(status=400, body=f"malformed Slack request: {exc}\n")
        context[ACCEPTED] = (
            await write_down(w, accepted) if isinstance(accepted, Delivery) else accepted
        )
        await next()
        return None

    return accept


@dataclass(frozen=True)
class WrittenDown:
    """A delivery as the ledger took it before the ack: ``claim`` is this process's
    (None: a repeat, acted on or in hand elsewhere), or ``recorded`` is False when the
    ledger could not be written (the database is away: the work will say so)."""

    delivery: Delivery
    claim: Claim | None
    recorded: bool = True


async def write_down(w: SlackWiring, d: Delivery) -> WrittenDown:
    """Claim the delivery with what it asks and where to answer, before Slack gets its
    acknowledgement: Slack never sends again what it saw acknowledged, so a process that
    dies after the ack leaves this row for another to finish (``resume``)."""
    try:
        async with asyncio.timeout(WRITE_DOWN_WITHIN):  # no task of its own: not wait_for
            claim = await w.ledger.acknowledge(d.key, request_of(d))
    except Exception as exc:  # answered by the work itself (one line, "Database unavailable")
        unwritten(
            "could not write down %s before the ack (%s): answered now, lost if this "
            "process dies before the answer",
            d.key,
            type(exc).__name__,
        )
        return WrittenDown(d, None, recorded=False)
    return WrittenDown(d, claim)


def request_of(d: Delivery) -> dict[str, Any]:
    """What the ledger keeps of a delivery: enough to do it and answer it again."""
    return {
        "platform": "slack",
        "where": d.where,
        "user": d.user,
        "channel": d.channel,
        "thread": d.thread,
        "response_url": d.response_url,
        "group": d.group,
        "text": d.text,
        "action_id": d.action_id,
    }


def delivery_of(key: str, request: dict[str, Any]) -> Delivery:
    """The delivery a ledger row wrote down (``request_of``), read back."""
    action_id = str(request.get("action_id") or "")
    return Delivery(
        key=key,
        where=str(request.get("where") or "Slack"),
        user=str(request["user"]),
        channel=request.get("channel"),
        response_url=str(request.get("response_url") or ""),
        group=str(request.get("group") or ""),
        text=str(request.get("text") or ""),
        thread=request.get("thread"),
        decision=command_of(action_id) if action_id else None,
        action_id=action_id,
    )


def _listener(w: SlackWiring) -> Any:
    async def on_accepted(context: AsyncBoltContext) -> None:  # acked already: ack_at_once
        accepted = context[ACCEPTED]
        if isinstance(accepted, UnknownButton):
            reply = messages.unknown_button(accepted.action_id)
            w.spawn(w.answer(accepted.response_url, payload(reply)))
        elif not accepted.recorded:
            w.dispatch(accepted.delivery)
        elif accepted.claim is None:
            log.info(
                "repeated delivery %s: acted on or in hand already, ignored", accepted.delivery.key
            )
        else:
            w.spawn(handle_delivery(w, accepted.delivery, claimed=accepted.claim))

    return on_accepted


# What queuebot keeps of a payload. A ledger key is made of Slack's ids: each part
# printable ASCII without spaces or the key's separator ":" (so no two deliveries can
# share a key), and short enough that a key always fits the ledger whole (200
# characters): Slack's ids are a few dozen characters.
_ID = re.compile(r"[!-9;-~]+")
_MAX_TEXT = 10_000  # a slash command's text; Slack's are far shorter


def _dig(body: Any, *path: str) -> Any:
    """``body[path[0]][path[1]]...``, or None where a part is missing or not an object."""
    for key in path:
        if not isinstance(body, dict):
            return None
        body = body.get(key)
    return body


def _id(value: Any, name: str, longest: int = 64) -> str:
    if not isinstance(value, str) or len(value) > longest or not _ID.fullmatch(value):
        raise Malformed(f"{name} is missing or not a Slack id")
    return value


def _optional_id(value: Any, name: str) -> str | None:
    return None if value is None else _id(value, name)


def answer_url(value: Any, slack_api: str) -> str:
    """The response_url to answer at: an https URL (Slack's are https://hooks.slack.com/...)
    or one at the origin of SLACK_API_BASE_URL. Plain http is allowed there and nowhere
    else: that is how the tests' fake Slack, serving http on 127.0.0.1, gets its answers
    (SLACK_API_BASE_URL points at it), while a payload can never send queuebot's answer
    over plain http to any other address."""
    if not isinstance(value, str) or not re.fullmatch(r"[!-~]{1,2000}", value):
        raise Malformed("response_url is missing or not a URL")
    try:
        url, api = urlsplit(value), urlsplit(slack_api)
        origin = (url.scheme, url.hostname, url.port)
        api_origin = (api.scheme, api.hostname, api.port)
    except ValueError:
        raise Malformed("response_url is not a URL") from None
    if not url.hostname or (url.scheme != "https" and origin != api_origin):
        raise Malformed("response_url is not an https URL")
    return value


def command_delivery(body: dict[str, Any], *, group: str, slack_api: str) -> Delivery:
    """A slash command's delivery; Malformed names the part Slack would never send."""
    text = body.get("text", "")
    if not isinstance(text, str) or "\x00" in text or len(text) > _MAX_TEXT:
        raise Malformed("text is not a command's text")
    return Delivery(
        key=f"slack:command:{_id(body.get('trigger_id'), 'trigger_id', longest=150)}",
        where=f"Slack /{group}",
        user=_id(body.get("user_id"), "user_id"),
        channel=_optional_id(body.get("channel_id"), "channel_id"),
        response_url=answer_url(body.get("response_url"), slack_api),
        group=group,
        text=text,
    )


def button_click(body: dict[str, Any], *, slack_api: str) -> Delivery | UnknownButton:
    """A click's delivery, or UnknownButton when the button names no change request that
    could exist (``cr:approve:0``); Malformed names the part Slack would never send."""
    actions = body.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    action_id = _dig(action, "action_id")
    if not isinstance(action_id, str) or not action_id.isprintable() or len(action_id) > 255:
        raise Malformed("the action's action_id is missing or unreadable")
    response_url = answer_url(body.get("response_url"), slack_api)
    user = _id(_dig(body, "user", "id"), "user.id")
    decision = command_of(action_id)
    if decision is None:
        return UnknownButton(action_id, response_url)
    return Delivery(
        key=f"slack:action:{_id(_dig(action, 'action_ts'), 'action_ts')}:{user}:{action_id}",
        where=f"Slack button {action_id}",
        user=user,
        channel=_optional_id(_dig(body, "channel", "id"), "channel.id"),
        response_url=response_url,
        thread=_optional_id(_dig(body, "container", "thread_ts"), "container.thread_ts"),
        decision=decision,
        action_id=action_id,
    )


def _host(url: str) -> str:
    """Where an answer goes, for the log: host and port only (a response_url's path is
    what lets anyone post to the conversation)."""
    try:
        parts = urlsplit(url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    except ValueError:
        return "an unreadable URL"


async def handle_delivery(
    w: SlackWiring,
    d: Delivery,
    *,
    claimed: Claim | None = None,
    acked_at: datetime | None = None,
) -> None:
    """Answer one acknowledged delivery: once per ledger key, through the one error
    boundary, back to its response_url.

    The key is claimed before the ack (``claimed``; otherwise here) and kept fresh until
    the answer is out. A change marks it done in its own transaction; the answer marks it
    answered. A crash in between leaves a claim that goes stale, and another process
    adopts it (``resume``): a read is answered again, a change acts once, or is said
    to be done."""
    inv = invocation(w, d.user, d.channel, d.thread)
    claim: Claim | None = claimed
    async with contextlib.AsyncExitStack() as fresh:  # the claim, kept fresh until answered

        async def run() -> Reply | None:
            nonlocal claim
            if claim is None:
                claim = await w.ledger.claim(d.key)
            if claim is None:
                log.info("repeated delivery %s: acted on or in hand already, ignored", d.key)
                return None
            await fresh.enter_async_context(w.ledger.kept_fresh(claim))
            work = replace(inv, delivery=claim)
            if d.decision is not None:
                return await w.router.handle(d.decision, work)
            return await w.router.handle_text(d.group, d.text, work)

        reply = await answer(run(), correlation_id=inv.correlation_id, where=d.where)
        if reply is None:
            return
        # A successful click rewrites the request's own message (who approved, the
        # result); a refusal goes only to whoever clicked and leaves the buttons for
        # someone else.
        rewrite = isinstance(d.decision, Approve | Reject) and not reply.error
        try:
            await w.answer_late(d, reply, acked_at=acked_at, rewrite=rewrite)
        finally:
            if claim is not None:  # answered (or unanswerable): nothing more to do
                await answer(
                    w.ledger.finish(claim), correlation_id=inv.correlation_id, where=d.where
                )


async def resume(w: SlackWiring, orphan: Orphan) -> None:
    """Finish a delivery another process acknowledged and died on: do it (a change still
    acts once), or, where its change had committed, say what it did; the answer goes to
    the response_url while Slack takes answers there, to the channel after."""
    d = delivery_of(orphan.claim.key, orphan.request)
    acked_at = orphan.acked_at
    log.info("finishing %s, acknowledged by a process that stopped before answering", d.key)
    if orphan.state == CLAIMED:
        await handle_delivery(w, d, claimed=orphan.claim, acked_at=acked_at)
        return
    reply = messages.done_before_restart(asked(d), orphan.outcome)
    try:
        await w.answer_late(d, reply, acked_at=acked_at, rewrite=False)
    finally:
        await answer(w.ledger.finish(orphan.claim), correlation_id="-", where=d.where)


def asked(d: Delivery) -> str:
    """What the person asked, in their words, for an answer given after a restart."""
    if d.action_id:
        return words(d.action_id)
    return f"/{d.group} {d.text}".strip()
