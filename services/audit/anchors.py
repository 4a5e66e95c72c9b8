"""Anchors kept outside the database: the trail's head (``N:MAC``) posted to the audit
channel (``[channels.audit]``) after each executed change, after each incident event and
on a schedule, through the outbox, so a chat history holds what ``queuebot audit verify
--anchor`` checks against.

The post is written in the change's (or the incident event's) own transaction, so an
anchor exists for every one that committed; the scheduled one is posted only when the
head moved since the last anchor (plan waves, expiries)."""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services import outbox
from services.audit.trail import AuditTrail
from services.db.on_commit import on_commit
from services.db.tables import OutboxItem
from services.message import Message, Text
from services.notify import Notifier

ANCHOR = "audit.anchor"  # the outbox kind of an anchor post
SUBJECT = "audit"
CHANNEL = "audit"  # the configured channel name the anchors go to
_items = cast(sa.Table, OutboxItem.__table__)


def newest_post() -> sa.ColumnElement[bool]:
    """The newest anchor post in the outbox, which the anchor job reads to post the head
    only when it moved: forgetting done posts spares it."""
    return outbox.newest(ANCHOR, SUBJECT)


class Anchors:
    """Writes the trail's head to the outbox; posts it to the audit channel (the outbox
    kind ``services/audit/jobs.py`` registers)."""

    def __init__(self, *, trail: AuditTrail, relay: outbox.Outbox, notifier: Notifier) -> None:
        self.trail = trail
        self.relay = relay
        self.notifier = notifier

    async def record(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        only_if_moved: bool = False,
        kick: bool = True,
    ) -> bool:
        """Inside the caller's transaction: post the head once it commits, at once after
        the commit (``kick``) or by the relay's next pass. False when there is nothing
        (new) to post."""
        head = await self.trail.head(conn)
        if head is None:
            return False
        if only_if_moved and await _last_posted(conn) == str(head):
            return False
        payload = {"anchor": str(head), "keyed": self.trail.keyed}
        await outbox.add(conn, kind=ANCHOR, subject=SUBJECT, payload=payload, now=now)
        if kick:
            on_commit(conn, self.relay.kick(ANCHOR, SUBJECT))
        return True

    async def post(self, item: outbox.Item) -> None:
        anchor = str(item.payload["anchor"])
        keyed = "keyed" if item.payload.get("keyed") else "UNKEYED (set QUEUEBOT_AUDIT_KEY)"
        text = f"queuebot audit anchor {anchor} ({keyed})"
        hint = f"Check the trail still holds it: queuebot audit verify --anchor {anchor}"
        await self.notifier.post(
            channel=CHANNEL, message=Message(text, (Text(text, mono=True), Text(hint)))
        )


async def _last_posted(conn: AsyncConnection) -> str | None:
    payload = (
        await conn.execute(
            sa.select(_items.c.payload)
            .where(_items.c.kind == ANCHOR, _items.c.subject == SUBJECT)
            .order_by(_items.c.id.desc())
            .limit(1)
        )
    ).scalar_one_or_none()
    return str(payload["anchor"]) if payload else None
