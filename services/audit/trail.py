"""The audit trail's writer and checker: append-only, chained, written in the same
transaction as the change it records.

Each event's seal covers its content and the previous event's seal, and a one-row head
records the last id and seal, so an edited, deleted (even the last), inserted or
reordered event breaks ``verify``. With ``QUEUEBOT_AUDIT_KEY`` the seal is an HMAC nobody
without the key can recompute; anchors (``head``) kept outside the database catch even a
rewrite with the key, a truncate or a deleted tail. Database triggers (migrations 0002
and 0006) refuse UPDATE, DELETE and TRUNCATE on the events, and any move of the head but
the append's. See docs/audit.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from pydantic import SecretBytes, SecretStr
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit.chain import (
    GENESIS,
    HMAC_SHA256,
    Actor,
    Anchor,
    AuditKeyMismatch,
    AuditKeyMissing,
    Verification,
    seal,
    sealed,
)
from services.audit.walk import verify_chain
from services.db.tables import AuditEvent, AuditHead
from services.jsonable import canonical

AUDIT_LOCK = 0x71B0_0002
_events = cast(sa.Table, AuditEvent.__table__)
_head = cast(sa.Table, AuditHead.__table__)


# One event, its values as parameters, never inside the statement: SQLAlchemy caches a
# statement's compiled form together with the statement it was first compiled from, so
# values given with ``.values(...)`` would stay in memory for the life of the process (an
# event's details can be a hundred megabytes: every row image of a large redrive).
_INSERT = _events.insert().values(
    {c.name: sa.bindparam(c.name) for c in _events.c if c.name != "id"}
)
_INSERT_ONE = _INSERT.returning(_events.c.id)


def _extend() -> sa.Update:
    """On PostgreSQL: one event appended and the head moved onto it, in one statement
    (the head's trigger sees the event the statement inserted before it)."""
    appended = _INSERT.returning(_events.c.id, _events.c.hash).cte("appended")
    return (
        _head.update()
        .where(_head.c.id == 1, _head.c.last_id < appended.c.id)  # forward only
        .values(last_id=appended.c.id, last_hash=appended.c.hash)
        .add_cte(appended)
    )


_EXTEND = _extend()


async def lock_chain(conn: AsyncConnection) -> None:
    """Serialise appenders: the chain has one tip."""
    if conn.dialect.name == "postgresql":
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": AUDIT_LOCK})
    else:  # take SQLite's write lock before reading the tip
        await conn.execute(_head.update().where(sa.false()).values(last_id=_head.c.last_id))


@dataclass(frozen=True)
class NewEvent:
    """An event to append (``AuditTrail.append_many``): what ``append`` takes."""

    action: str
    actor: Actor
    at: datetime
    subject: str | None = None
    queue: str | None = None
    incident: str | None = None
    reason: str | None = None
    evidence: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


# What a domain above the trail does in the transaction of every append (``on_append``):
# the board asks for its refresh when an event says something it shows changed.
Appended = Callable[[AsyncConnection, Sequence[NewEvent]], Awaitable[None]]


class AuditTrail:
    """The trail's writer and checker. Built once in the wiring (with the key from the
    environment, or none) and given to every service that records what it did; each
    ``append`` runs inside the caller's transaction."""

    def __init__(self, *, key: SecretStr | None = None) -> None:
        # Held as a secret, so no repr, log or traceback of this object shows it.
        self._secret = SecretBytes(key.get_secret_value().encode()) if key is not None else None
        self._proven = False  # the key sealed one of this trail's keyed events correctly
        self._appended: list[Appended] = []

    def on_append(self, then: Appended) -> None:
        """Run ``then`` with every batch of events appended, in their transaction (every
        change queuebot makes writes its events in the change's own transaction, so what
        ``then`` writes commits with the change or not at all)."""
        self._appended.append(then)

    @property
    def _key(self) -> bytes | None:
        return self._secret.get_secret_value() if self._secret is not None else None

    def __repr__(self) -> str:
        return f"AuditTrail(keyed={self.keyed})"

    @property
    def keyed(self) -> bool:
        return self._key is not None

    async def append(
        self,
        conn: AsyncConnection,
        *,
        action: str,
        actor: Actor,
        at: datetime,
        subject: str | None = None,
        queue: str | None = None,
        incident: str | None = None,
        reason: str | None = None,
        evidence: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one event inside the caller's transaction; return its id. Without a key
        onto a keyed trail it refuses (the trail would read as downgraded)."""
        (event_id,) = await self.append_many(
            conn,
            [
                NewEvent(
                    action=action,
                    actor=actor,
                    at=at,
                    subject=subject,
                    queue=queue,
                    incident=incident,
                    reason=reason,
                    evidence=evidence,
                    details=details or {},
                )
            ],
        )
        return event_id

    async def append_many(self, conn: AsyncConnection, events: Sequence[NewEvent]) -> list[int]:
        """Append ``events`` in their order inside the caller's transaction; return their
        ids. The chain is locked and its head read once; then each event follows the one
        before it and moves the head, exactly as one ``append`` after another would."""
        if not events:
            return []
        ids = await self._append(conn, events)
        for then in self._appended:
            await then(conn, events)
        return ids

    async def _append(self, conn: AsyncConnection, events: Sequence[NewEvent]) -> list[int]:
        await lock_chain(conn)
        head = (
            await conn.execute(sa.select(_head.c.last_id, _head.c.last_hash).where(_head.c.id == 1))
        ).first()
        if head is not None:  # the tip cannot move while the chain is locked
            await self._check_key(conn, int(head[0]))
        rows = self._sealed(events, str(head[1]) if head is not None else GENESIS)
        if head is not None and len(rows) > 1 and conn.dialect.name == "postgresql":
            # One round trip for them all (the driver pipelines the statements): each
            # adds one event and moves the head onto it, and the triggers check each.
            moved = await conn.execute(_EXTEND, rows)
            found = await conn.execute(
                sa.select(_events.c.id).where(_events.c.id > head[0]).order_by(_events.c.id)
            )
            ids = [int(event_id) for event_id in found.scalars()]
            if moved.rowcount != len(rows) or len(ids) != len(rows):
                raise RuntimeError(
                    f"appending {len(rows)} audit events moved the head {moved.rowcount} "
                    f"times and left {len(ids)} events after it"
                )
            return ids
        ids = []
        for row in rows:
            event_id = int((await conn.execute(_INSERT_ONE, row)).scalar_one())
            if head is None and not ids:
                await conn.execute(
                    _head.insert().values(id=1, last_id=event_id, last_hash=row["hash"])
                )
            else:
                await conn.execute(
                    _head.update()
                    .where(_head.c.id == 1)
                    .values(last_id=event_id, last_hash=row["hash"])
                )
            ids.append(event_id)
        return ids

    def _sealed(self, events: Sequence[NewEvent], prev: str) -> list[dict[str, Any]]:
        """The events' rows, each sealed over its content and the seal before it."""
        rows: list[dict[str, Any]] = []
        for event in events:
            row: dict[str, Any] = {
                "occurred_at": event.at,
                "action": event.action,
                "actor_person": event.actor.person,
                "actor_platform": event.actor.platform,
                "actor_account": event.actor.account,
                "subject": event.subject,
                "queue": event.queue,
                "incident": event.incident,
                "reason": event.reason,
                "evidence": event.evidence,
                # stored as the very text that is sealed
                "details": canonical(dict(event.details)),
                "prev_hash": prev,
            }
            row["scheme"], row["hash"] = seal(row, self._key)
            rows.append(row)
            prev = row["hash"]
        return rows

    async def head(self, conn: AsyncConnection) -> Anchor | None:
        """The newest event as an anchor (``N:MAC``) to keep outside the database, or None
        for an empty trail. Cheap: it reads the head, not the chain."""
        head = (
            await conn.execute(sa.select(_head.c.last_id, _head.c.last_hash).where(_head.c.id == 1))
        ).first()
        return Anchor(int(head[0]), str(head[1])) if head is not None else None

    async def require_key(self, conn: AsyncConnection) -> None:
        """Refuse a key that cannot extend this trail, before anything is written: a
        keyed trail needs its key (``AuditKeyMissing``), and the key must be the one its
        newest keyed event was sealed with (``AuditKeyMismatch``). An unkeyed trail takes
        a key: its next event is its first keyed one. The one check every process that
        writes audit events runs at its start; ``append`` runs it again on the tip it
        extends, so a trail keyed by another process meanwhile is never extended with a
        wrong key."""
        head = (
            await conn.execute(sa.select(_head.c.last_id).where(_head.c.id == 1))
        ).scalar_one_or_none()
        if head is not None:
            await self._check_key(conn, int(head))

    async def _check_key(self, conn: AsyncConnection, tip: int) -> None:
        """``require_key`` on event ``tip``, the head. Once the key sealed a keyed event
        of this trail correctly, it is the trail's key: later checks cost nothing."""
        if self._proven:
            return
        scheme = (
            await conn.execute(sa.select(_events.c.scheme).where(_events.c.id == tip))
        ).scalar()
        if scheme != HMAC_SHA256:
            return
        if self._key is None:
            raise AuditKeyMissing(event=tip, doing="appending to it")
        row = (await conn.execute(sa.select(_events).where(_events.c.id == tip))).mappings().first()
        if row is None or not sealed(row, self._key):
            raise AuditKeyMismatch(event=tip)
        self._proven = True

    async def key_problem(self, conn: AsyncConnection) -> str | None:
        """What ``require_key`` would refuse, as a sentence (``config check``), or None."""
        try:
            await self.require_key(conn)
        except (AuditKeyMissing, AuditKeyMismatch) as refused:
            return refused.message
        return None

    async def verify(
        self,
        conn: AsyncConnection,
        *,
        anchors: Iterable[Anchor] = (),
        cross_check: bool = True,
        now: datetime | None = None,
    ) -> Verification:
        """Walk the whole chain; the first event that does not fit is reported. Every
        anchor must still hold, and (``cross_check``) every change request, approval and
        plan in the state tables must have its events, and each change request, incident,
        communication and pending incident timer must say what its events say (timers
        judged at ``now``, the wall clock unless given). Raises ``AuditKeyMissing`` when
        the trail has keyed events and this trail has no key."""
        return await verify_chain(
            conn, key=self._key, anchors=anchors, cross_check=cross_check, now=now
        )
