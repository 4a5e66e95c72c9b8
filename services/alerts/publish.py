"""Alert threads in chat: the outbox's delivery of an alert group's posts.

Each group's posts go out in the order they were written (one outbox subject per group):
the root message first, then what goes in its thread. The root is posted once per
channel and episode; its reference is stored after each channel's post, so a retried
delivery updates the root it already posted instead of posting a second one. A reply
delivered just before a crash may show twice in its thread (never zero times).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any, Protocol, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.alerts import messages
from services.alerts.desk import GROUPS, AlertCounters
from services.alerts.groups import AlertRecord
from services.db import reading, transaction
from services.errors import QueuebotError
from services.estate.model import Triage
from services.estate.profile import as_utc
from services.message import Message
from services.notify import MessageRef, Notifier
from services.outbox import NOT_POSTED, Item, PostedNowhere

log = logging.getLogger("queuebot.alerts")


class TriageSource(Protocol):
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

    async def deliver(self, item: Item) -> None:
        notifier = self.notifier
        if notifier is None:  # no chat platform: the alert is kept, there is nowhere to post
            raise PostedNowhere(NOT_POSTED)
        action = str(item.payload["action"])
        group = await self._group(int(item.payload["group"]))
        episode = int(item.payload.get("episode", group["episode"]))
        if action == "root":
            await self._root(notifier, group, episode)
        elif action == "update":
            await self._update(notifier, group, episode)
        elif action == "reply":
            await self._in_thread(
                notifier, group, episode, messages.from_json(item.payload["message"])
            )
        elif action == "triage":
            await self._in_thread(notifier, group, episode, await self._triage(group))
        else:
            raise ValueError(f"unknown alert post {action!r}")
        if self.counters is not None:
            self.counters.alert_posted(action)

    async def _group(self, number: int) -> dict[str, Any]:
        async with reading(self.engine) as conn:
            row = (
                (await conn.execute(sa.select(GROUPS).where(GROUPS.c.id == number)))
                .mappings()
                .one()
            )
        group = dict(row)
        for name in ("opened_at", "changed_at", "resolved_at"):
            group[name] = as_utc(group[name])  # SQLite gives them back without a zone
        return group

    def _root_message(self, group: Mapping[str, Any]) -> Message:
        alerts = [AlertRecord.from_json(fp, data) for fp, data in group["alerts"].items()]
        return messages.root(group, alerts, now=self.clock())

    async def _root(self, notifier: Notifier, group: dict[str, Any], episode: int) -> None:
        roots = _roots(group, episode)
        message = self._root_message(group)
        for channel in group["route"].get("channels") or []:
            if channel in roots:  # posted by an earlier attempt: bring it up to date
                for ref in roots[channel]:
                    await notifier.update(ref=ref, message=message)
                continue
            refs = await notifier.post(channel=channel, message=message)
            roots[channel] = refs
            await self._store_roots(int(group["id"]), episode, roots)
        if not group["route"].get("channels"):
            log.warning("alert group %s has no channel to post to", group["id"])

    async def _store_roots(
        self, number: int, episode: int, roots: Mapping[str, list[MessageRef]]
    ) -> None:
        stored = {
            "episode": episode,
            "posts": {ch: [asdict(ref) for ref in refs] for ch, refs in roots.items()},
        }
        async with transaction(self.engine, subject=f"alert group {number}") as conn:
            await conn.execute(GROUPS.update().where(GROUPS.c.id == number).values(roots=stored))

    async def _update(self, notifier: Notifier, group: dict[str, Any], episode: int) -> None:
        message = self._root_message(group)
        for refs in _roots(group, episode).values():
            for ref in refs:
                await notifier.update(ref=ref, message=message)

    async def _in_thread(
        self, notifier: Notifier, group: dict[str, Any], episode: int, message: Message
    ) -> None:
        roots = _roots(group, episode)
        threads = [ref for refs in roots.values() for ref in refs]
        for ref in threads:
            await notifier.post(channel=ref.channel, message=message, thread=ref)
        if not threads:  # the root never got a reference: the news still goes out
            for channel in group["route"].get("channels") or []:
                await notifier.post(channel=channel, message=message)

    async def _triage(self, group: Mapping[str, Any]) -> Message:
        queue = cast(str | None, group.get("queue"))
        if self.reads is None or queue is None:
            return messages.triage_unavailable(queue, "no queue is known for this alert")
        try:
            report = await self.reads.triage(queue=queue)
        except QueuebotError as exc:
            return messages.triage_unavailable(queue, str(exc))
        return messages.triage(report, queue=queue)


def _roots(group: Mapping[str, Any], episode: int) -> dict[str, list[MessageRef]]:
    stored = group.get("roots") or {}
    if int(stored.get("episode", -1)) != episode:
        return {}
    return {
        channel: [MessageRef(**ref) for ref in refs]
        for channel, refs in (stored.get("posts") or {}).items()
    }
