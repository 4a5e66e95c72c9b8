"""Publishing a plan: its own chat message kept current, each wave's news in its thread.

Whichever task or replica publishes first posts the plan's message; the others update it.
Posting claims ``plan:N:message`` in the delivery ledger, and a publisher that finds the
claim taken waits for the poster's stored reference (or for the claim to be given back,
and then posts itself). The poster refreshes its claim while its post runs, however long
(a 429 waited out); a claim whose holder died is stale ``CLAIM_STALE`` after its last
refresh and is taken over, within the time a second publisher waits. So there
is one plan message, unless a post's outcome is lost (Slack took it but the answer never
came back, or storing its reference failed): then a later publisher posts another. When
no reference comes at all, the news goes to the plan's channel without a thread rather
than nowhere.

A plan's news has one place it can be shown: where its request was made (a Slack or
Discord channel; the console session that asked). Each post carries that destination, so
only a process that reaches it delivers it, whichever process ran the wave: serve posts
a Slack plan's news, the console that asked prints its own (``announce``). What was not
shown is said by ``/queue plan`` (``unshown_words``), never passed over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.db import reading, transaction
from services.db.on_commit import on_commit
from services.ledger import Claim, DeliveryLedger
from services.message import Message
from services.notify import ChannelRef, MessageRef, Notifier
from services.outbox import (
    NOT_POSTED,
    Item,
    Outbox,
    PostedNowhere,
    Unshown,
    add,
    destination,
    unshown,
)
from services.plans import messages, store
from services.plans.model import News, Note, PlanView, WaveStarted, news_from, news_json
from services.plans.store import PLANS

log = logging.getLogger("queuebot.plans")
PLAN_NEWS = "plan.news"  # the outbox kind of a plan's posts
CLAIM_STALE = timedelta(seconds=10)  # unrefreshed this long: the poster died
WAIT_FOR_MESSAGE = 15.0  # seconds a second publisher waits for the first one's post
POLL = 0.1

# A plan row holds JSON null until its message is posted (SQL NULL in older rows or edits)
_NO_MESSAGE = sa.or_(PLANS.c.message_ref.is_(None), sa.cast(PLANS.c.message_ref, sa.Text) == "null")


class PlanPublisher:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        notifier: Notifier | None,
        ledger: DeliveryLedger,
        wait: float = WAIT_FOR_MESSAGE,
    ) -> None:
        self.engine = engine
        self.notifier = notifier
        self.ledger = ledger
        self.wait = wait

    async def post(self, item: Item) -> None:
        """The outbox's delivery of a plan's news (see ``announce``)."""
        await self.publish(int(item.subject), news_from(item.payload["news"]))

    async def view(self, number: int) -> PlanView:
        async with reading(self.engine) as conn:
            return await store.view(conn, number)

    async def publish(self, number: int, news: Sequence[News]) -> None:
        """Bring the plan's message up to date (posting it first if there is none) and
        post each piece of news into its thread. Without a notifier (no chat platform is
        configured) there is nowhere to post: the outbox closes the item as not posted,
        and the plan's state is in /queue plan."""
        notifier = self.notifier
        if notifier is None:
            raise PostedNowhere(NOT_POSTED)
        view = await self.view(number)
        ref = await self._plan_message(notifier, number, view)
        for item in news:
            message = _news(view, item)
            if ref is not None:
                await notifier.post(channel=ref.channel, message=message, thread=ref)
            else:
                await notifier.post(channel=await self._origin(number), message=message)

    async def _plan_message(
        self, notifier: Notifier, number: int, view: PlanView
    ) -> MessageRef | None:
        """The plan's message, brought up to date; posted first if there is none yet."""
        key = f"plan:{number}:message"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        while True:
            stored = await self._stored_ref(number)
            if stored is not None:
                latest = await self.view(number)  # newer than what an earlier poster rendered
                await notifier.update(ref=stored, message=messages.plan_message(latest))
                return stored
            claim = await self.ledger.claim(key, stale_after=CLAIM_STALE)
            if claim is not None:
                return await self._post_plan_message(notifier, number, view, claim)
            if loop.time() >= deadline:
                log.warning(
                    "P-%s: its message was being posted elsewhere and never appeared", number
                )
                return None
            await asyncio.sleep(POLL)

    async def _post_plan_message(
        self, notifier: Notifier, number: int, view: PlanView, claim: Claim
    ) -> MessageRef | None:
        try:
            async with self.ledger.kept_fresh(claim):
                posted = await notifier.post(
                    channel=await self._origin(number), message=messages.plan_message(view)
                )
        except BaseException:
            await self.ledger.release(claim)
            raise
        if not posted:
            await self.ledger.release(claim)  # nothing to thread under; the next one tries
            return None
        ref = posted[0]
        async with transaction(self.engine, subject=f"P-{number}") as conn:
            stored = await conn.execute(
                PLANS.update()
                .where(PLANS.c.id == number, _NO_MESSAGE)
                .values(message_ref=asdict(ref))
                .returning(PLANS.c.id)
            )
            if stored.first() is not None:
                return ref
        # Our claim went stale mid-post and another publisher's message was stored first:
        # thread under that one; ours stays behind as an orphan.
        log.warning("P-%s: a second plan message was posted (%s); using the first", number, ref)
        return await self._stored_ref(number)

    async def _stored_ref(self, number: int) -> MessageRef | None:
        async with reading(self.engine) as conn:
            stored = (
                await conn.execute(sa.select(PLANS.c.message_ref).where(PLANS.c.id == number))
            ).scalar_one()
        return MessageRef(**stored) if stored else None

    async def _origin(self, number: int) -> ChannelRef:
        async with reading(self.engine) as conn:
            origin = (
                await conn.execute(sa.select(PLANS.c.origin).where(PLANS.c.id == number))
            ).scalar_one()
        platform = str(origin.get("platform") or "console")
        return ChannelRef(platform, str(origin.get("channel") or platform))


def _news(view: PlanView, news: News) -> Message:
    if isinstance(news, Note):
        return messages.plan_note(view, news.text)
    wave = next(w for w in view.waves if w.number == news.wave)
    if isinstance(news, WaveStarted):
        return messages.wave_started(view, wave)
    return messages.wave_finished(view, wave)


async def announce(
    conn: AsyncConnection, outbox: Outbox, number: int, news: Sequence[News], *, now: datetime
) -> None:
    """Inside the step's transaction: the plan's news goes into the outbox, to be posted
    once (and only if) the step commits, at once after the commit."""
    payload = {"news": news_json(list(news))}
    origin = (
        await conn.execute(sa.select(PLANS.c.origin).where(PLANS.c.id == number))
    ).scalar_one()
    await add(
        conn,
        kind=PLAN_NEWS,
        subject=str(number),
        payload=payload,
        now=now,
        destination=news_destination(origin or {}),
    )
    on_commit(conn, outbox.kick(PLAN_NEWS, str(number)))


def news_destination(origin: Mapping[str, Any]) -> str | None:
    """Where a plan's news must be shown: the channel its request was made in (for the
    console, the session that asked). None where the request named none (made before
    console sessions were named, or by a tool): any relay posts it where it can."""
    channel = origin.get("channel")
    if not channel:
        return None
    return destination(str(origin.get("platform") or "console"), str(channel))


async def unshown_news(conn: AsyncConnection, number: int) -> Unshown:
    """The plan's posts nobody has been shown (waiting, or closed as posted nowhere)."""
    return await unshown(conn, PLAN_NEWS, str(number))


def unshown_words(ref: str, news: Unshown, *, here: str | None = None) -> str | None:
    """What ``/queue plan`` says of the plan's posts nobody has been shown; None when every
    one was shown. ``here``: the destination of the place it was asked in (a console
    session prints its own posts)."""
    said: list[str] = []
    if news.waiting and news.since is not None:
        # an update: the plan's message brought up to date, and what happened in its thread
        posts = f"{news.waiting} update(s) of {ref}'s news since {news.since:%H:%M:%S} UTC"
        platform, _, channel = (news.where or "").partition(":")
        failed = f"; the last attempt failed: {news.error}" if news.error else ""
        if news.where is not None and news.where == here and platform == "console":
            said.append(f"Not printed yet: {posts}, on their way to this console session.")
        elif platform == "console":
            said.append(
                f"Not shown anywhere: {posts}. They can be printed only by the console "
                f"session that asked for {ref} ({channel}), and it has not printed them: a "
                "session that has ended never will, and no other session takes them over. "
                "The plan as it stands is above."
            )
        elif news.where is not None:
            said.append(
                f"Not posted yet: {posts}, waiting for queuebot serve to post them to "
                f"{platform} channel {channel}{failed}."
            )
        else:
            said.append(f"Not posted yet: {posts}, waiting for the outbox relay{failed}.")
    if news.closed:
        why = (news.why or "").removeprefix("not posted: ")
        said.append(f"Not posted anywhere: {news.closed} update(s) of {ref}'s news; {why}.")
    return " ".join(said) or None
