"""Publishing a plan: its own chat message kept current, each wave's news in its thread.

The plan's message is posted once, whichever task or replica publishes first. Posting
claims ``plan:N:message`` in the delivery ledger; a publisher that finds the claim taken
waits for the poster's stored reference and then updates the message instead of posting a
second one. A claim whose holder died before storing a reference goes stale and is taken
over. When no reference comes (the platform refused the post, or the wait ran out), the
news is posted to the plan's channel without a thread rather than lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.ledger import DeliveryLedger
from services.message import Message
from services.models import Plan
from services.notify import ChannelRef, MessageRef, Notifier
from services.plans import messages
from services.plans.model import PlanView

log = logging.getLogger("queuebot.plans")
PLANS = cast(sa.Table, Plan.__table__)
CLAIM_STALE = timedelta(minutes=2)  # far beyond a post, even one waiting out a 429
WAIT_FOR_MESSAGE = 15.0  # seconds a second publisher waits for the first one's post
POLL = 0.1

Post = tuple[str, Any]  # ("note", text) | ("started", wave number) | ("finished", wave number)


class PlanPublisher:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        notifier: Notifier,
        ledger: DeliveryLedger,
        view: Callable[[int], Awaitable[PlanView]],
        wait: float = WAIT_FOR_MESSAGE,
    ) -> None:
        self.engine = engine
        self.notifier = notifier
        self.ledger = ledger
        self.view = view
        self.wait = wait

    async def publish(self, number: int, posts: list[Post]) -> None:
        view = await self.view(number)
        ref = await self._plan_message(number, view)
        for kind, detail in posts:
            message = _news(view, kind, detail)
            if ref is not None:
                await self.notifier.post(channel=ref.channel, message=message, thread=ref)
            else:
                await self.notifier.post(channel=await self._origin(number), message=message)

    async def _plan_message(self, number: int, view: PlanView) -> MessageRef | None:
        """The plan's message, brought up to date; posted first if there is none yet."""
        if view.message_ref:
            ref = MessageRef(**view.message_ref)
            await self.notifier.update(ref=ref, message=messages.plan_message(view))
            return ref
        key = f"plan:{number}:message"
        if await self.ledger.claim(key, stale_after=CLAIM_STALE):
            return await self._post_plan_message(number, view, key)
        deadline = asyncio.get_running_loop().time() + self.wait
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(POLL)
            stored = await self._stored_ref(number)
            if stored is not None:
                latest = await self.view(number)  # newer than what the poster rendered
                await self.notifier.update(ref=stored, message=messages.plan_message(latest))
                return stored
        log.warning("P-%s: its message was being posted elsewhere and never appeared", number)
        return None

    async def _post_plan_message(self, number: int, view: PlanView, key: str) -> MessageRef | None:
        try:
            posted = await self.notifier.post(
                channel=await self._origin(number), message=messages.plan_message(view)
            )
        except BaseException:
            await self.ledger.release(key)
            raise
        if not posted:
            await self.ledger.release(key)  # nothing to thread under; the next one tries
            return None
        ref = posted[0]
        async with self.engine.begin() as conn:
            await conn.execute(
                PLANS.update().where(PLANS.c.id == number).values(message_ref=asdict(ref))
            )
        return ref

    async def _stored_ref(self, number: int) -> MessageRef | None:
        async with self.engine.connect() as conn:
            stored = (
                await conn.execute(sa.select(PLANS.c.message_ref).where(PLANS.c.id == number))
            ).scalar_one()
        return MessageRef(**stored) if stored else None

    async def _origin(self, number: int) -> ChannelRef:
        async with self.engine.connect() as conn:
            origin = (
                await conn.execute(sa.select(PLANS.c.origin).where(PLANS.c.id == number))
            ).scalar_one()
        platform = str(origin.get("platform") or "console")
        return ChannelRef(platform, str(origin.get("channel") or platform))


def _news(view: PlanView, kind: str, detail: Any) -> Message:
    if kind == "note":
        return messages.plan_note(view, str(detail))
    wave = next(w for w in view.waves if w.number == detail)
    if kind == "started":
        return messages.wave_started(view, wave)
    return messages.wave_finished(view, wave)
