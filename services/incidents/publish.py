"""An incident's posts, queued in the outbox in the transaction of what they report
(``post_item``, ``queue_post``) and delivered by it in the order they were written: the
checklist opens the incident's thread (inside the alert's thread when it was declared
from one, else under a new message where it was declared), then its news goes there; an
audience's communication goes to that audience's channels."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox as relay
from services.alerts import store as alert_store
from services.audit.anchors import Anchors
from services.db import reading, transaction
from services.db.on_commit import on_commit
from services.incidents import store
from services.message import Message, message_from_json, message_json
from services.notify import ChannelRef, MessageRef, Notifier
from services.outbox import NOT_POSTED, Item, Outbox, PostedNowhere

INCIDENT_POST = "incident.post"  # the outbox kind of an incident's posts

NO_CHANNEL = "not posted: none of the audience's channels is on a configured chat platform"
Delivered = Callable[[Item, Sequence[MessageRef]], Awaitable[None]]


def subject(number: int) -> str:
    return f"incident:{number}"


def post_item(
    number: int, action: str, message: Message, *, channels: Sequence[str] = ()
) -> dict[str, Any]:
    """An incident's post as the outbox holds it (``relay.add``, ``relay.add_many``):
    urgent, so a storm of alert posts never holds it back; an audience's post in the lane
    of its first channel, the thread's in the incident's own."""
    item: dict[str, Any] = {
        "subject": subject(number),
        "payload": {
            "action": action,
            "incident": number,
            "message": message_json(message),
            "channels": list(channels),
        },
        "priority": relay.URGENT,
    }
    if action == "audience" and channels:
        item["lane"] = relay.channel_lane(channels[0])
    return item


async def queue_post(
    conn: AsyncConnection, number: int, action: str, message: Message, now: datetime
) -> None:
    """One post of the incident's, in the caller's transaction."""
    await relay.add_many(
        conn, kind=INCIDENT_POST, items=[post_item(number, action, message)], now=now
    )


async def anchor(anchors: Anchors | None, conn: AsyncConnection, now: datetime) -> bool:
    """After an incident event, in its transaction: the trail's head to the audit
    channel (through the outbox, posted once this commits and the relay is woken).
    False where there is no audit channel."""
    if anchors is None:
        return False
    return await anchors.record(conn, now=now, kick=False)


def wake_after(conn: AsyncConnection, outbox: Outbox) -> None:
    """Wake the outbox relays once ``conn``'s transaction commits."""

    async def wake() -> None:
        outbox.wake()

    on_commit(conn, wake)


@dataclass(frozen=True)
class Where:
    """Where an incident's posts go: its thread once its checklist opened one, else where
    it was declared; its checklist into the threads of the alert it was declared from."""

    thread: list[MessageRef]
    origin: ChannelRef
    alert_roots: list[MessageRef]


class IncidentPublisher:
    def __init__(
        self, *, engine: AsyncEngine, notifier: Notifier | None, delivered: Delivered
    ) -> None:
        """``delivered`` records where a message to an audience went (no refs: nowhere)."""
        self.engine = engine
        self.notifier = notifier
        self.delivered = delivered

    async def post(self, item: Item) -> None:
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
                await self.delivered(item, refs)
            if not refs:
                raise PostedNowhere(NOT_POSTED if notifier is None else NO_CHANNEL)
            return
        if notifier is None:
            raise PostedNowhere(NOT_POSTED)
        number = int(item.payload["incident"])
        message = message_from_json(item.payload["message"])
        where = await self._where(number)
        if action == "open":
            if where.thread:  # an earlier attempt opened it: post nothing twice
                return
            thread = await self._open(notifier, where, message)
            async with transaction(self.engine, subject=f"INC-{number}") as conn:
                await store.set_thread(conn, number, [asdict(ref) for ref in thread])
            return
        if not where.thread:  # the checklist never got a reference: the news still goes out
            await notifier.post(channel=where.origin, message=message)
            return
        for ref in where.thread:
            await notifier.post(channel=ref.channel, message=message, thread=ref)

    async def _where(self, number: int) -> Where:
        async with reading(self.engine) as conn:
            thread, origin, alert_group = await store.thread_of(conn, number)
            group = None if alert_group is None else await alert_store.read_group(conn, alert_group)
            roots = [] if group is None else group.roots.refs()
        return Where(thread=_refs(thread), origin=_origin(origin), alert_roots=roots)

    async def _open(self, notifier: Notifier, where: Where, message: Message) -> list[MessageRef]:
        if where.alert_roots:  # declared from an alert: the incident lives in the alert's thread
            for ref in where.alert_roots:
                await notifier.post(channel=ref.channel, message=message, thread=ref)
            return where.alert_roots
        return await notifier.post(channel=where.origin, message=message)


def _refs(stored: Mapping[str, Any] | None) -> list[MessageRef]:
    if not stored:
        return []
    return [MessageRef(**ref) for ref in stored.get("refs") or []]


def _origin(origin: Mapping[str, Any]) -> ChannelRef:
    platform = str(origin.get("platform") or "console")
    return ChannelRef(platform, str(origin.get("channel") or platform))
