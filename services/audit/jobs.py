"""The audit trail's work in the background: its head posted to the audit channel (the
outbox's ``audit.anchor``, by ``Anchors.post``, where ``[channels.audit]`` and a chat
platform are configured), and every ``ANCHOR_EVERY`` once more when it moved since the
last post (the scheduler's ``audit.anchor``). The outbox keeps the newest anchor post
when it forgets done items: the scheduled job reads it back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.audit import anchors
from services.audit.anchors import Anchors
from services.outbox import Outbox
from services.scheduler import Scheduler, SharedDeps

ANCHOR = "audit.anchor"  # the scheduler's kind; its posts are the outbox's kind of that name
ANCHOR_EVERY = timedelta(minutes=15)  # the head is posted after each change, and this often


class Deps(SharedDeps, Protocol):
    @property
    def anchors(self) -> Anchors | None:
        """None: no audit channel, or no chat platform to post to."""
        ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """The anchor posts, and where the periodic jobs run, the scheduled anchor; each run
    schedules the next."""
    outbox.keep_newest(anchors.ANCHOR, anchors.SUBJECT)
    posts = deps.anchors
    if posts is not None:
        outbox.register(anchors.ANCHOR, posts.post)
    if not deps.one_database:
        return

    async def anchor(conn: AsyncConnection, subject: str, now: datetime) -> None:
        await scheduler.schedule(
            conn, kind=ANCHOR, subject=subject, due_at=now + ANCHOR_EVERY, created_at=now
        )
        if posts is not None:  # posted at once after the commit, where the head moved
            await posts.record(conn, now=now, only_if_moved=True)

    async def first(conn: AsyncConnection, now: datetime) -> None:
        await scheduler.ensure(conn, kind=ANCHOR, subject="all", due_at=now + ANCHOR_EVERY)

    sched.register(ANCHOR, anchor)
    sched.on_start(first)
