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
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox as relay
from services.alerts import groups, messages
from services.alerts.group_commit import GroupCommit
from services.alerts.groups import AlertRecord, Merge
from services.alerts.payload import BadPayload, Notification, describe, from_stored
from services.alerts.routes import destination
from services.config.alerts import AlertsConfig
from services.db import Outage, error_line, reading, transaction
from services.errors import ConcurrentChange, DatabaseUnavailable
from services.estate.profile import as_utc
from services.jsonable import loads
from services.models import AlertGroup, AlertInbox
from services.outbox import Outbox

log = logging.getLogger("queuebot.alerts")
INBOX = cast(sa.Table, AlertInbox.__table__)
GROUPS = cast(sa.Table, AlertGroup.__table__)
ALERT_POST = "alert.post"  # the outbox kind of alert threads' posts
BATCH = 500
# what processing changes in a group row
_KEPT = (
    "status",
    "alerts",
    "episode",
    "changed_at",
    "resolved_at",
    "notifications",
    "annotations",
    "links",
    "truncated",
)
KEEP_PROCESSED = timedelta(days=7)
MAX_ERROR = 500  # characters of a set-aside notification's error that are kept


class FiringCounter(Protocol):
    def detector_fired(self, detector: str) -> None: ...


class AlertCounters(FiringCounter, Protocol):
    def alert_received(self, source: str) -> None: ...

    def alert_posted(self, kind: str) -> None: ...


def key_hash(source: str, receiver: str, group_key: str) -> str:
    return hashlib.sha256(f"{source}\x00{receiver}\x00{group_key}".encode()).hexdigest()


def subject(group_id: int) -> str:
    return f"alert:{group_id}"


def _row(notification: Notification, *, source: str, now: datetime) -> dict[str, Any]:
    return {
        "source": source,
        "received_at": now,
        "receiver": notification.receiver,
        "group_key": notification.groupKey,
        "status": notification.status,
        "payload": notification.stored(),
    }


async def store(
    conn: AsyncConnection, notification: Notification, *, source: str, now: datetime
) -> None:
    """Put a notification in the inbox (inside the caller's transaction). The row goes as
    parameters: a statement holding it would be kept, with the whole payload, in
    SQLAlchemy's cache of compiled statements."""
    await conn.execute(INBOX.insert(), _row(notification, source=source, now=now))


@dataclass(frozen=True)
class _Row:
    id: int
    source: str
    notification: Notification


@dataclass(frozen=True)
class SetAside:
    """The stored notifications set aside: how many, and the oldest of them."""

    count: int
    oldest_id: int | None = None
    oldest_at: datetime | None = None
    oldest_error: str | None = None


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
        self._inbox = GroupCommit(engine, INBOX, subject="the alert inbox")

    async def receive(self, notification: Notification, *, source: str = "alertmanager") -> None:
        """Store a notification; return once it is committed. Raises DatabaseUnavailable
        (and anything else the database says) when it could not be stored. Notifications
        arriving together are written in one commit (``GroupCommit``)."""
        await self._inbox.write(_row(notification, source=source, now=self.clock()))
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
            query = (
                # the payload as text, read here: one row that is not JSON fails only itself
                sa.select(INBOX.c.id, INBOX.c.source, sa.cast(INBOX.c.payload, sa.Text))
                .where(INBOX.c.processed_at.is_(None), INBOX.c.set_aside_at.is_(None))
                .order_by(INBOX.c.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            if only is not None:
                query = query.where(INBOX.c.id.in_(list(only)))
            rows = (await conn.execute(query)).all()
            if not rows:
                return 0
            claimed.extend(int(r[0]) for r in rows)
            batch = []
            for row_id, source, text in rows:
                try:
                    batch.append(_Row(int(row_id), str(source), from_stored(loads(text))))
                except Exception as exc:  # not a notification: its own, whatever it is
                    unreadable[int(row_id)] = _error(exc)
            posted = await self._apply(conn, batch, now) if batch else 0
            if batch:
                await conn.execute(
                    INBOX.update()
                    .where(INBOX.c.id.in_([r.id for r in batch]))
                    .values(processed_at=now)
                )
            for row_id, error in unreadable.items():
                await self._mark_set_aside(conn, row_id, error, now)
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
                    marked = await self._mark_set_aside(conn, part[0], error, self.clock())
                if marked:
                    _log_set_aside(part[0], error)
                    log.debug("the failure that set #%d aside", part[0], exc_info=exc)
                    done += 1
        return done

    @staticmethod
    async def _mark_set_aside(
        conn: AsyncConnection, row_id: int, error: str, now: datetime
    ) -> bool:
        result = await conn.execute(
            INBOX.update()
            .where(
                INBOX.c.id == row_id,
                INBOX.c.processed_at.is_(None),
                INBOX.c.set_aside_at.is_(None),
            )
            .values(set_aside_at=now, error=error)
        )
        return bool(result.rowcount)

    async def set_aside(self) -> SetAside:
        """The notifications set aside now (for /readyz): one read of a partial index
        that holds only them."""
        async with reading(self.engine) as conn:
            row = (
                await conn.execute(
                    sa.select(
                        INBOX.c.id,
                        INBOX.c.set_aside_at,
                        INBOX.c.error,
                        sa.func.count().over(),
                    )
                    .where(INBOX.c.set_aside_at.is_not(None))
                    .order_by(INBOX.c.id)
                    .limit(1)
                )
            ).first()
        if row is None:
            return SetAside(0)
        return SetAside(int(row[3]), int(row[0]), as_utc(row[1]), row[2])

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
        firsts: dict[str, _Row] = {}
        for row in batch:
            n = row.notification
            firsts.setdefault(key_hash(row.source, n.receiver, n.groupKey), row)
        await self._create_missing(conn, firsts, now)
        locked = (
            await conn.execute(
                sa.select(GROUPS)
                .where(GROUPS.c.key_hash.in_(sorted(firsts)))
                .order_by(GROUPS.c.key_hash)
                .with_for_update()
            )
        ).mappings()
        state = {str(g["key_hash"]): dict(g) for g in locked}
        posts: list[dict[str, Any]] = []
        for row in batch:
            n = row.notification
            group = state[key_hash(row.source, n.receiver, n.groupKey)]
            for payload in self._merge_into(group, n, now):
                posts.append(_outbox_item(group, payload))
        # one statement for the batch's groups and one for its posts (in the order made)
        await conn.execute(
            GROUPS.update()
            .where(GROUPS.c.id == sa.bindparam("group_id"))
            .values({name: sa.bindparam(name) for name in _KEPT}),
            [{"group_id": g["id"], **{name: g[name] for name in _KEPT}} for g in state.values()],
        )
        if posts:
            await relay.add_many(conn, kind=ALERT_POST, items=posts, now=now)
        return len(posts)

    async def _create_missing(
        self, conn: AsyncConnection, firsts: dict[str, _Row], now: datetime
    ) -> None:
        present = set(
            (
                await conn.execute(
                    sa.select(GROUPS.c.key_hash).where(GROUPS.c.key_hash.in_(list(firsts)))
                )
            ).scalars()
        )
        missing = [key for key in sorted(firsts) if key not in present]
        if not missing:
            return
        values = [self._new_group(key, firsts[key], now) for key in missing]
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        await conn.execute(insert(GROUPS).values(values).on_conflict_do_nothing())

    def _new_group(self, key: str, row: _Row, now: datetime) -> dict[str, Any]:
        n = row.notification
        labels = {**n.commonLabels, **n.groupLabels}
        alertname = labels.get("alertname") or (n.alerts[0].name if n.alerts else "alert")
        where = destination(self.config, alertname=alertname, labels=labels, queues=self.queues)
        return {
            "key_hash": key,
            "source": row.source,
            "receiver": n.receiver,
            "group_key": n.groupKey,
            "alertname": alertname[:200],
            "queue": where.queue,
            "route": where.json(),
            "labels": labels,
            "annotations": dict(n.commonAnnotations),
            "links": {},
            "status": "resolved",
            "alerts": {},
            "episode": 0,
            "opened_at": now,
            "changed_at": now,
            "resolved_at": None,
            "notifications": 0,
            "truncated": 0,
            "roots": {},
        }

    def _merge_into(
        self, group: dict[str, Any], n: Notification, now: datetime
    ) -> list[dict[str, Any]]:
        """Merge one notification into ``group`` (in place); the posts it makes."""
        known = {fp: AlertRecord.from_json(fp, data) for fp, data in group["alerts"].items()}
        result = groups.merge(known, n)
        group["notifications"] = int(group["notifications"]) + 1
        if n.commonAnnotations:
            group["annotations"] = dict(n.commonAnnotations)
        group["links"] = _links(n)
        group["alerts"] = {fp: record.json() for fp, record in result.alerts.items()}
        group["truncated"] = n.truncatedAlerts  # each notification carries the whole group
        if not result.changed:
            return []
        before = str(group["status"])
        group["status"] = result.status
        group["changed_at"] = now
        posts = self._posts(group, n, result, before, now)
        if result.status == "resolved" and before == "firing":
            group["resolved_at"] = now
        elif result.status == "firing":
            group["resolved_at"] = None
        return posts

    def _posts(
        self, group: dict[str, Any], n: Notification, result: Merge, before: str, now: datetime
    ) -> list[dict[str, Any]]:
        common = dict(group["labels"])
        episode = int(group["episode"])
        if before != "firing" and result.status == "firing":
            resolved_at = group["resolved_at"]
            reopen = timedelta(hours=self.config.reopen_hours)
            if episode == 0 or resolved_at is None or now - (as_utc(resolved_at) or now) > reopen:
                group["episode"] = episode + 1
                posts = [{"action": "root", "episode": episode + 1}]
                if n.truncatedAlerts:
                    note = messages.not_shown(n.truncatedAlerts)
                    posts.append(
                        {
                            "action": "reply",
                            "episode": episode + 1,
                            "message": messages.to_json(note),
                        }
                    )
                if group["route"].get("triage") and group.get("queue"):
                    posts.append({"action": "triage", "episode": episode + 1})
                return [{**p, "group": int(group["id"])} for p in posts]
        refired = before != "firing" and result.status == "firing"
        group_resolved = before == "firing" and result.status == "resolved"
        started = min((a.starts_at for a in result.alerts.values() if a.starts_at), default=None)
        message = messages.news(
            started=result.started,
            resolved=result.resolved,
            common=common,
            group_resolved=group_resolved,
            refired=refired,
            lasted=messages.lasted(started, now) if group_resolved else None,
            not_shown=n.truncatedAlerts,
            notices=group.get("source") == messages.HOUSEKEEPING,
        )
        return [
            {
                "action": "reply",
                "group": int(group["id"]),
                "episode": episode,
                "message": messages.to_json(message),
                "turn": refired or group_resolved,  # the group fired or resolved as a whole
            },
            {"action": "update", "group": int(group["id"]), "episode": episode},
        ]

    @property
    def firings(self) -> FiringCounter | None:
        return self.counters


async def forget_processed(conn: AsyncConnection, *, before: datetime) -> None:
    """Drop notifications processed before ``before`` (a step of a housekeeping job)."""
    await conn.execute(
        INBOX.delete().where(INBOX.c.processed_at.is_not(None), INBOX.c.processed_at < before)
    )


def _log_set_aside(row_id: int, error: str) -> None:
    log.error(
        "alert notification #%d could not be processed and is set aside (kept in "
        "qb_alert_inbox; the others go on): %s",
        row_id,
        error,
    )


def _outbox_item(group: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """A post of the group as the outbox holds it, in the lane of the group's first
    channel. Its root and triage are ``NORMAL``; its root updates ``BULK``, each
    superseded by a newer one of its episode while undelivered (an update shows the
    group as it is when delivered); its news ``BULK``, superseded by newer news or by its
    turns (fired again, resolved), which are ``NORMAL`` and always go out."""
    channels = group["route"].get("channels") or []
    item: dict[str, Any] = {"subject": subject(int(group["id"])), "payload": payload}
    if channels:
        item["lane"] = relay.channel_lane(str(channels[0]))
    action = str(payload["action"])
    if action in ("update", "reply"):
        item["collapse"] = f"{action}:{payload['episode']}"
        item["priority"] = relay.NORMAL if payload.get("turn") else relay.BULK
    return item


def _links(n: Notification) -> dict[str, str]:
    links: dict[str, str] = {}
    source = next((a.generatorURL for a in n.alerts if a.generatorURL), "")
    if source:
        links["Source"] = source
    if n.externalURL:
        links["Alertmanager"] = n.externalURL
    return links
