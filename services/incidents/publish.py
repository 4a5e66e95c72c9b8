"""An incident's posts, delivered by the outbox in the order they were written: the
checklist opens the incident's thread (inside the alert's thread when it was declared
from one, else under a new message where it was declared), then its news goes there; an
audience's communication goes to that audience's channels."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.alerts.store import GROUPS
from services.db import reading, transaction
from services.incidents.store import INCIDENTS
from services.message import Message, message_from_json
from services.notify import ChannelRef, MessageRef, Notifier
from services.outbox import NOT_POSTED, Item, PostedNowhere

NO_CHANNEL = "not posted: none of the audience's channels is on a configured chat platform"
Delivered = Callable[[Mapping[str, Any], Sequence[MessageRef]], Awaitable[None]]


class IncidentPublisher:
    def __init__(
        self, *, engine: AsyncEngine, notifier: Notifier | None, delivered: Delivered
    ) -> None:
        """``delivered`` records where a message to an audience went (no refs: nowhere)."""
        self.engine = engine
        self.notifier = notifier
        self.delivered = delivered

    async def deliver(self, item: Item) -> None:
        notifier = self.notifier
        action = str(item.payload["action"])
        told = action == "audience" and item.payload.get("obligation") is not None
        if action == "audience":  # told where a platform took it; nowhere is said so
            refs: list[MessageRef] = []
            if notifier is not None:
                message = message_from_json(item.payload["message"])
                for channel in item.payload.get("channels") or []:
                    refs += await notifier.post(channel=str(channel), message=message)
            if told:
                await self.delivered(item.payload, refs)
            if not refs:
                raise PostedNowhere(NOT_POSTED if notifier is None else NO_CHANNEL)
            return
        if notifier is None:
            raise PostedNowhere(NOT_POSTED)
        number = int(item.payload["incident"])
        message = message_from_json(item.payload["message"])
        incident = await self._incident(number)
        thread = _refs(incident.get("thread"))
        if action == "open":
            if thread:  # an earlier attempt opened it: post nothing twice
                return
            thread = await self._open(notifier, incident, message)
            async with transaction(self.engine, subject=f"INC-{number}") as conn:
                await conn.execute(
                    INCIDENTS.update()
                    .where(INCIDENTS.c.id == number)
                    .values(thread={"refs": [asdict(ref) for ref in thread]})
                )
            return
        if not thread:  # the checklist never got a reference: the news still goes out
            await notifier.post(channel=_origin(incident), message=message)
            return
        for ref in thread:
            await notifier.post(channel=ref.channel, message=message, thread=ref)

    async def _incident(self, number: int) -> dict[str, Any]:
        async with reading(self.engine) as conn:
            found = (
                (await conn.execute(sa.select(INCIDENTS).where(INCIDENTS.c.id == number)))
                .mappings()
                .one()
            )
            incident = dict(found)
            incident["alert_roots"] = []
            if incident["alert_group"] is not None:
                roots = (
                    await conn.execute(
                        sa.select(GROUPS.c.roots).where(GROUPS.c.id == incident["alert_group"])
                    )
                ).scalar_one_or_none() or {}
                incident["alert_roots"] = [
                    MessageRef(**ref)
                    for refs in (roots.get("posts") or {}).values()
                    for ref in refs
                ]
        return incident

    async def _open(
        self, notifier: Notifier, incident: dict[str, Any], message: Message
    ) -> list[MessageRef]:
        alert_roots: list[MessageRef] = incident["alert_roots"]
        if alert_roots:  # declared from an alert: the incident lives in the alert's thread
            for ref in alert_roots:
                await notifier.post(channel=ref.channel, message=message, thread=ref)
            return alert_roots
        return await notifier.post(channel=_origin(incident), message=message)


def _refs(stored: Any) -> list[MessageRef]:
    if not stored:
        return []
    return [MessageRef(**ref) for ref in stored.get("refs") or []]


def _origin(incident: dict[str, Any]) -> ChannelRef:
    origin = incident.get("origin") or {}
    platform = str(origin.get("platform") or "console")
    return ChannelRef(platform, str(origin.get("channel") or platform))
