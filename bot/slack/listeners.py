"""Slack listeners: slash commands and approval buttons, each two small translations.

Every request is acknowledged first, by the ``ack_at_once`` listener middleware (Slack gives
up after 3 s and Bolt answers 404 when ack is late). The listener then hands a plain
delivery to a task, which records it in the ledger so that a retry or a double delivery
does nothing more, runs the command and answers through ``response_url``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.boundary import answer
from bot.slack.render import blocks, fallback_text
from commands.context import Invocation, new_correlation_id
from commands.model import Approve, Command, Reject
from commands.parser import GROUPS
from commands.reply import Reply
from commands.router import Router
from services.ledger import HEARTBEAT, Claim, DeliveryLedger
from services.people import Directory

log = logging.getLogger("queuebot.slack")

ACTION = re.compile(r"^cr:(approve|reject):([0-9]{1,12})\Z")


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
    decision: Command | None = None  # a button: Approve or Reject


@dataclass
class SlackWiring:
    router: Router
    directory: Directory
    ledger: DeliveryLedger
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    session: aiohttp.ClientSession | None = None

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
        sent = await client.send_dict(body)
        if sent.status_code >= 400:
            log.warning("Slack refused an answer: HTTP %s %s", sent.status_code, sent.body)

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
        app.command(f"/{group}", middleware=[ack_at_once])(_command_listener(w, group))
    app.action(ACTION, middleware=[ack_at_once])(_action_listener(w))


def _command_listener(w: SlackWiring, group: str) -> Any:
    async def on_command(body: dict[str, Any]) -> None:  # acked already: ack_at_once
        w.dispatch(
            Delivery(
                key=f"slack:command:{body.get('trigger_id')}",
                where=f"Slack /{group}",
                user=str(body.get("user_id", "")),
                channel=body.get("channel_id"),
                response_url=str(body.get("response_url", "")),
                group=group,
                text=str(body.get("text", "")),
            )
        )

    return on_command


def _action_listener(w: SlackWiring) -> Any:
    async def on_action(body: dict[str, Any], action: dict[str, Any]) -> None:  # acked already
        user = str(body.get("user", {}).get("id", ""))
        action_id = str(action.get("action_id", ""))
        matched = ACTION.match(action_id)  # Bolt routed it here by this pattern
        if matched is None:
            return
        verb, number = matched.groups()
        w.dispatch(
            Delivery(
                key=f"slack:action:{action.get('action_ts')}:{user}:{action_id}",
                where=f"Slack button {action_id}",
                user=user,
                channel=body.get("channel", {}).get("id"),
                response_url=str(body.get("response_url", "")),
                thread=body.get("container", {}).get("thread_ts"),
                decision=(
                    Approve(request=int(number))
                    if verb == "approve"
                    else Reject(request=int(number))
                ),
            )
        )

    return on_action


async def handle_delivery(w: SlackWiring, d: Delivery) -> None:
    """Answer one acknowledged delivery: once per ledger key, through the one error
    boundary, back to its response_url.

    The key is claimed first and kept fresh while the work runs. A change marks it done
    in its own transaction; anything else (a read, a refusal) is marked done once its
    answer is out. A crash in between leaves a claim that goes stale, and the platform's
    redelivery takes it over: a read is answered again, a change acts once."""
    inv = invocation(w, d.user, d.channel, d.thread)
    claim: Claim | None = None

    async def run() -> Reply | None:
        nonlocal claim
        claim = await w.ledger.claim(d.key)
        if claim is None:
            log.info("repeated delivery %s: acted on or in hand already, ignored", d.key)
            return None
        beating = asyncio.create_task(_keep_fresh(w.ledger, claim))
        try:
            work = replace(inv, delivery=claim)
            if d.decision is not None:
                return await w.router.handle(d.decision, work)
            return await w.router.handle_text(d.group, d.text, work)
        finally:
            beating.cancel()

    reply = await answer(run(), correlation_id=inv.correlation_id, where=d.where)
    if reply is None:
        return
    # A successful click rewrites the request's own message (who approved, the result); a
    # refusal goes only to whoever clicked and leaves the buttons for someone else.
    rewrite = d.decision is not None and not reply.error
    try:
        await w.answer(d.response_url, payload(reply, replace_original=rewrite))
    finally:
        if claim is not None:  # answered (or unanswerable): a redelivery does nothing more
            await answer(w.ledger.finish(claim), correlation_id=inv.correlation_id, where=d.where)


async def _keep_fresh(ledger: DeliveryLedger, claim: Claim) -> None:
    """Refresh the claim while its work runs, so that only a dead owner's goes stale."""
    while True:
        await asyncio.sleep(HEARTBEAT)
        try:
            if not await ledger.heartbeat(claim):
                return  # taken over: the change will find out and roll back
        except Exception:  # the database is away; the work will say so
            log.debug("could not refresh the claim on %s", claim.key)
