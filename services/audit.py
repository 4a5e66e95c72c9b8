"""The audit trail: append-only, hash-chained, written in the same transaction
as the change it records.

Each event's hash covers its content and the previous event's hash, and a one-row head
records the last id and hash, so an edited, deleted (even the last), inserted or
reordered event breaks ``verify``. Database triggers (migration 0002) also refuse UPDATE
and DELETE on the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.jsonable import canonical, digest
from services.models import AuditEvent, AuditHead

GENESIS = "0" * 64
AUDIT_LOCK = 0x71B0_0002
_events = cast(sa.Table, AuditEvent.__table__)
_head = cast(sa.Table, AuditHead.__table__)


@dataclass(frozen=True)
class Actor:
    """Who did it: the person (when known) and the platform account used."""

    person: str | None
    platform: str
    account: str

    @classmethod
    def system(cls, what: str) -> Actor:
        return cls(person=None, platform="queuebot", account=what)


_HASHED = (
    "occurred_at",
    "action",
    "actor_person",
    "actor_platform",
    "actor_account",
    "subject",
    "queue",
    "incident",
    "reason",
    "evidence",
    "details",
    "prev_hash",
)


def event_hash(row: Mapping[str, Any]) -> str:
    """SHA-256 over the event's canonical JSON, which includes the previous event's hash."""
    return digest({k: row[k] for k in _HASHED})


async def lock_chain(conn: AsyncConnection) -> None:
    """Serialise appenders: the chain has one tip."""
    if conn.dialect.name == "postgresql":
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": AUDIT_LOCK})
    else:  # take SQLite's write lock before reading the tip
        await conn.execute(_head.update().where(sa.false()).values(last_id=_head.c.last_id))


class AuditTrail:
    """The trail's writer and checker. Built once in the wiring and given to every service
    that records what it did; each ``append`` runs inside the caller's transaction."""

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
        """Append one event inside the caller's transaction; return its id."""
        await lock_chain(conn)
        head = (await conn.execute(sa.select(_head.c.last_hash).where(_head.c.id == 1))).first()
        prev = head[0] if head else GENESIS
        row: dict[str, Any] = {
            "occurred_at": at,
            "action": action,
            "actor_person": actor.person,
            "actor_platform": actor.platform,
            "actor_account": actor.account,
            "subject": subject,
            "queue": queue,
            "incident": incident,
            "reason": reason,
            "evidence": evidence,
            "details": canonical(dict(details or {})),  # stored as the very text that is hashed
            "prev_hash": prev,
        }
        row["hash"] = event_hash(row)
        event_id = (
            await conn.execute(_events.insert().values(**row).returning(_events.c.id))
        ).scalar_one()
        if head is None:
            await conn.execute(_head.insert().values(id=1, last_id=event_id, last_hash=row["hash"]))
        else:
            await conn.execute(
                _head.update()
                .where(_head.c.id == 1)
                .values(last_id=event_id, last_hash=row["hash"])
            )
        return int(event_id)

    async def verify(self, conn: AsyncConnection) -> Verification:
        """Walk the whole chain; the first event that does not fit is reported."""
        return await _verify_chain(conn)


@dataclass(frozen=True)
class Verification:
    checked: int
    first_bad: int | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


async def _verify_chain(conn: AsyncConnection, *, batch: int = 5000) -> Verification:
    """Walk the chain in id order and report the first event that does not fit."""
    prev = GENESIS
    checked = 0
    last_id: int | None = None
    after = 0
    while True:
        rows = (
            (
                await conn.execute(
                    sa.select(_events)
                    .where(_events.c.id > after)
                    .order_by(_events.c.id)
                    .limit(batch)
                )
            )
            .mappings()
            .all()
        )
        if not rows:
            break
        for row in rows:
            if row["prev_hash"] != prev:
                return Verification(
                    checked,
                    row["id"],
                    (
                        f"event {row['id']} does not follow the event before it: an event before "
                        "it was deleted, inserted or reordered"
                    ),
                )
            if event_hash(dict(row)) != row["hash"]:
                return Verification(
                    checked, row["id"], f"event {row['id']} was edited after it was written"
                )
            prev = row["hash"]
            last_id = row["id"]
            checked += 1
        after = rows[-1]["id"]
    head = (await conn.execute(sa.select(_head).where(_head.c.id == 1))).mappings().first()
    if head is None:
        if checked:
            return Verification(checked, None, "the audit head record is missing")
        return Verification(0)
    if head["last_id"] != last_id or head["last_hash"] != prev:
        return Verification(
            checked,
            head["last_id"],
            (
                f"the chain ends at event {last_id} but the head records event {head['last_id']}: "
                "the latest events were deleted"
            ),
        )
    return Verification(checked)
