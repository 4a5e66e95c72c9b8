"""Alert threads in chat: the outbox's delivery of an alert group's posts.

Each group's posts go out in the order they were written (one outbox subject per group):
the root message first, then what goes in its thread. The root is posted once per
channel and episode; its reference is stored after each channel's post, so a retried
delivery updates the root it already posted instead of posting a second one. A reply
delivered just before a crash may show twice in its thread (never zero times).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from services.alerts import messages, store
from services.alerts.model import (
    AlertGroup,
    PostReply,
    PostRoot,
    PostTriage,
    PostUpdate,
    Roots,
    post_from_payload,
)
from services.alerts.service import AlertCounters
from services.db import reading, transaction
from services.errors import QueuebotError
from services.estate.model import Triage
from services.message import Message
from services.notify import MessageRef, Notifier
from services.outbox import NOT_POSTED, Item, PostedNowhere

log = logging.getLogger("queuebot.alerts")


class TriageSource(Protocol):
    """What answers the triage that comes with an alert (``services.reads.service.QueueReads``)."""

    async def triage(self, *, queue: str | None = None) -> Triage: ...


class AlertPublisher:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        notifier: Notifier | None,
        reads: TriageSource | None,
        clock: Callable[[], datetime],
        counters: AlertCounters | None = None,
    ) -> None:
        self.engine = engine
        self.notifier = notifier
        self.reads = reads
        self.clock = clock
        self.counters = counters

    async def post(self, item: Item) -> None:
        """Poster one post of a group's thread, whichever version queued it."""
        notifier = self.notifier
        if notifier is None:  # no chat platform: the alert is kept, there is nowhere to post
            raise PostedNowhere(NOT_POSTED)
        post = post_from_payload(item.payload)
        group = await self._group(post.group)
        episode = group.episode if post.episode is None else post.episode
        match post:
            case PostRoot():
                await self._root(notifier, group, episode)
            case PostUpdate():
                await self._update(notifier, group, episode)
            case PostReply(message=message):
                await self._in_thread(notifier, group, episode, message)
            case PostTriage():
                await self._in_thread(notifier, group, episode, await self._triage(group))
        if self.counters is not None:
            self.counters.alert_posted(post.kind)

    async def _group(self, number: int) -> AlertGroup:
        async with reading(self.engine) as conn:
            group = await store.read_group(conn, number)
        if group is None:
            raise LookupError(f"alert group {number} does not exist")
        return group

    def _root_message(self, group: AlertGroup) -> Message:
        return messages.root(group, now=self.clock())

    async def _root(self, notifier: Notifier, group: AlertGroup, episode: int) -> None:
        roots = group.roots.of(episode)
        message = self._root_message(group)
        for channel in group.route.channels:
            if channel in roots:  # posted by an earlier attempt: bring it up to date
                for ref in roots[channel]:
                    await notifier.update(ref=ref, message=message)
                continue
            refs = await notifier.post(channel=channel, message=message)
            roots[channel] = tuple(refs)
            await self._store_roots(group.id, Roots(episode, dict(roots)))
        if not group.route.channels:
            log.warning("alert group %s has no channel to post to", group.id)

    async def _store_roots(self, number: int, roots: Roots) -> None:
        async with transaction(self.engine, subject=f"alert group {number}") as conn:
            await store.store_roots(conn, number, roots)

    async def _update(self, notifier: Notifier, group: AlertGroup, episode: int) -> None:
        message = self._root_message(group)
        for refs in group.roots.of(episode).values():
            for ref in refs:
                await notifier.update(ref=ref, message=message)

    async def _in_thread(
        self, notifier: Notifier, group: AlertGroup, episode: int, message: Message
    ) -> None:
        threads: list[MessageRef] = [
            ref for refs in group.roots.of(episode).values() for ref in refs
        ]
        for ref in threads:
            await notifier.post(channel=ref.channel, message=message, thread=ref)
        if not threads:  # the root never got a reference: the news still goes out
            for channel in group.route.channels:
                await notifier.post(channel=channel, message=message)

    async def _triage(self, group: AlertGroup) -> Message:
        queue = group.queue
        if self.reads is None or queue is None:
            return messages.triage_unavailable(queue, "no queue is known for this alert")
        try:
            report = await self.reads.triage(queue=queue)
        except QueuebotError as exc:
            return messages.triage_unavailable(queue, str(exc))
        return messages.triage(report, queue=queue)
