"""Alerts in: notifications are stored in the inbox before they are acknowledged, then
processed into their group's state and the chat posts it needs (through the outbox).

Storing is one INSERT, so the webhook answers fast and a store that fails is a 503
Alertmanager retries. Processing runs beside it: it claims unprocessed notifications in
order (``FOR UPDATE SKIP LOCKED``, so replicas share the work), locks their groups in a
fixed order (no deadlock between replicas), merges each notification into its group and
writes the posts of real changes to the outbox in the same transaction. A notification
that changes nothing (Alertmanager's repeats) posts nothing.

One notification never holds the others. A stored notification whose processing fails
for a reason of its own (it is not a notification, or the database refuses what it would
write) is set aside: kept in the inbox with when and why, no longer tried, counted in
/metrics and named in /readyz, while the ones after it are processed. A pass that fails
because the database is away (or a concurrent change) is not the notifications' fault:
it is tried again whole, and nothing is set aside.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.alerts import store
from services.alerts.group_commit import GroupCommit
from services.alerts.merge import advance
from services.alerts.model import AlertGroup, AlertPost, SetAside
from services.alerts.payload import BadPayload, Notification, describe, from_stored
from services.alerts.routes import destination
from services.config.alerts import AlertsConfig
from services.db import Outage, error_line, reading, transaction
from services.errors import ConcurrentChange, DatabaseUnavailable
from services.jsonable import loads
from services.outbox import Outbox

log = logging.getLogger("queuebot.alerts")
BATCH = 500
MAX_ERROR = 500  # characters of a set-aside notification's error that are kept


class FiringCounter(Protocol):
    """Counts the detectors' firings (``services.metrics.Metrics``)."""

    def detector_fired(self, detector: str) -> None: ...


class AlertCounters(FiringCounter, Protocol):
    """Counts notifications received and posts made (``services.metrics.Metrics``)."""

    def alert_received(self, source: str) -> None: ...

    def alert_posted(self, kind: str) -> None: ...


@dataclass(frozen=True)
class _Row:
    id: int
    source: str
    notification: Notification


def its_own(exc: BaseException) -> bool:
    """Whether a failure to process notifications can be theirs: not the database being
    away, nor a concurrent change (both pass), nor a statement the database cannot run at
    all (a missing table or privilege: the same for every notification). What remains is
    the database refusing a value (``DataError``, ``IntegrityError``) and any failure of
    queuebot's own code on what the notification holds."""
    if isinstance(exc, DatabaseUnavailable | ConcurrentChange):
        return False
    if isinstance(exc, DBAPIError):
        return isinstance(exc, DataError | IntegrityError)
    return isinstance(exc, Exception)


def _error(exc: BaseException) -> str:
    """Why a notification was set aside, in one line (kept with it, shown in /readyz)."""
    if isinstance(exc, DBAPIError):
        said = f"the database refused it: {error_line(exc)}"
    elif isinstance(exc, ValidationError):
        said = f"not a notification: {describe(exc)}"
    elif isinstance(exc, BadPayload):
        said = f"not a notification: {exc}"
    else:
        said = f"{type(exc).__name__}: {exc}"
    said = " ".join(said.split())
    return said if len(said) <= MAX_ERROR else said[: MAX_ERROR - 3] + "..."


class AlertDesk:
    """A notification acknowledged is stored; each stored one is processed once, in
    order, or set aside with why. The use cases of alerts in, each one transaction."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        config: AlertsConfig,
        queues: Sequence[str],
        outbox: Outbox,
        counters: AlertCounters | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.config = config
        self.queues = list(queues)
        self.outbox = outbox
        self.counters = counters
        self._wake: asyncio.Event | None = None
        self._elsewhere: Callable[[], None] | None = None
        self._inbox = GroupCommit(engine, store.INBOX, subject="the alert inbox")

    async def receive(self, notification: Notification, *, source: str = "alertmanager") -> None:
        """Store a notification; return once it is committed. Raises DatabaseUnavailable
        (and anything else the database says) when it could not be stored. Notifications
        arriving together are written in one commit (``GroupCommit``)."""
        await self._inbox.write(store.inbox_row(notification, source=source, now=self.clock()))
        if self.counters is not None:
            self.counters.alert_received(source)
        self.wake()

    def wake(self) -> None:
        """Notifications were stored: processing starts its next pass now (here, or in
        the process ``forward_wakes`` named)."""
        if self._wake is not None:
            self._wake.set()
        if self._elsewhere is not None:
            self._elsewhere()

    def forward_wakes(self, to: Callable[[], None]) -> None:
        """Processing runs in another process (serve's worker): ``to`` tells it."""
        self._elsewhere = to

    async def process_due(self, limit: int = BATCH) -> int:
        """Process up to ``limit`` stored notifications, in order; how many were processed
        or set aside. When the pass fails for a reason that can be a notification's own
        (``its_own``), the notifications it held are processed again in halves until the
        one that fails is alone, and that one is set aside; any other failure is raised
        (the pass is tried again whole, nothing set aside)."""
        claimed: list[int] = []
        try:
            return await self._pass(limit=limit, only=None, claimed=claimed)
        except Exception as exc:
            if not claimed or not its_own(exc):
                raise
        return await self._isolate(claimed)

    async def _pass(self, *, limit: int, only: Sequence[int] | None, claimed: list[int]) -> int:
        """One transaction: claim the next notifications (of ``only``, when given), set
        aside those that are not notifications, merge the others and mark them processed.
        The ids claimed are added to ``claimed`` before anything can fail on them."""
        now = self.clock()
        unreadable: dict[int, str] = {}
        async with transaction(self.engine, subject="the alert inbox") as conn:
            rows = await store.claim(conn, limit=limit, only=only)
            if not rows:
                return 0
            claimed.extend(row_id for row_id, _, _ in rows)
            batch = []
            for row_id, source, text in rows:
                try:
                    batch.append(_Row(row_id, source, from_stored(loads(text))))
                except Exception as exc:  # not a notification: its own, whatever it is
                    unreadable[row_id] = _error(exc)
            posted = await self._apply(conn, batch, now) if batch else 0
            if batch:
                await store.mark_processed(conn, [r.id for r in batch], now)
            for row_id, error in unreadable.items():
                await store.mark_set_aside(conn, row_id, error, now)
        for row_id, error in unreadable.items():
            _log_set_aside(row_id, error)
        if posted:
            self.outbox.wake()
        return len(rows)

    async def _isolate(self, ids: list[int]) -> int:
        """Process ``ids`` in halves, each half in a transaction of its own, halving a
        half that fails until the notification that fails is alone; set that one aside.
        One bad notification among 500 costs about 18 transactions, not 500."""
        done = 0
        parts = [ids]
        while parts:
            part = parts.pop(0)
            try:
                done += await self._pass(limit=len(part), only=part, claimed=[])
            except Exception as exc:
                if not its_own(exc):
                    raise
                if len(part) > 1:
                    half = len(part) // 2
                    parts[:0] = [part[:half], part[half:]]
                    continue
                error = _error(exc)
                async with transaction(self.engine, subject="the alert inbox") as conn:
                    marked = await store.mark_set_aside(conn, part[0], error, self.clock())
                if marked:
                    _log_set_aside(part[0], error)
                    log.debug("the failure that set #%d aside", part[0], exc_info=exc)
                    done += 1
        return done

    async def set_aside(self) -> SetAside:
        """The notifications set aside now (for /readyz): one read of a partial index
        that holds only them."""
        async with reading(self.engine) as conn:
            return await store.set_aside(conn)

    async def run_forever(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        self._wake = asyncio.Event()
        outage = Outage(log, "alert processing")
        while not stop.is_set():
            try:
                while await self.process_due():
                    pass
                outage.passed()
            except DatabaseUnavailable as exc:
                outage.failed(exc)
            except Exception:
                log.exception("processing stored alerts failed; trying again")
            self._wake.clear()
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()

    # -- processing ------------------------------------------------------------------

    async def _apply(self, conn: AsyncConnection, batch: Sequence[_Row], now: datetime) -> int:
        """Merge the batch into its groups (created where missing, locked in a fixed
        order); write the groups in one statement and their posts in another, in the
        order made. How many posts."""
        firsts: dict[str, _Row] = {}
        for row in batch:
            firsts.setdefault(self._key(row), row)
        missing = await store.missing(conn, firsts)
        if missing:
            await store.create_groups(conn, [self._new_group(k, firsts[k], now) for k in missing])
        groups = await store.lock_groups(conn, firsts)
        reopen = timedelta(hours=self.config.reopen_hours)
        posts: list[tuple[AlertGroup, AlertPost]] = []
        for row in batch:
            key = self._key(row)
            groups[key], made = advance(groups[key], row.notification, now, reopen=reopen)
            posts.extend((groups[key], post) for post in made)
        await store.save_groups(conn, groups.values())
        await store.queue_posts(conn, posts, now=now)
        return len(posts)

    @staticmethod
    def _key(row: _Row) -> str:
        n = row.notification
        return store.key_hash(row.source, n.receiver, n.groupKey)

    def _new_group(self, key: str, row: _Row, now: datetime) -> dict[str, Any]:
        n = row.notification
        labels = {**n.commonLabels, **n.groupLabels}
        alertname = labels.get("alertname") or (n.alerts[0].name if n.alerts else "alert")
        where = destination(self.config, alertname=alertname, labels=labels, queues=self.queues)
        return store.new_group(
            key,
            source=row.source,
            notification=n,
            alertname=alertname,
            labels=labels,
            where=where,
            now=now,
        )

    @property
    def firings(self) -> FiringCounter | None:
        return self.counters


def _log_set_aside(row_id: int, error: str) -> None:
    log.error(
        "alert notification #%d could not be processed and is set aside (kept in "
        "qb_alert_inbox; the others go on): %s",
        row_id,
        error,
    )
