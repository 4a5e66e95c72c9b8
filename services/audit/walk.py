"""``verify``: walk the chain in id order and report the first thing that does not hold.

The reads are ordered so that a concurrent append is never mistaken for tampering: the
state tables first (a row seen there was committed with its events), then the head, then
the chain (every event up to that head is committed and can no longer be deleted), then
the head again (an event the walk met must be at or below it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit.chain import (
    GENESIS,
    HMAC_SHA256,
    SCHEMES,
    SHA256,
    Anchor,
    AuditKeyMissing,
    Verification,
    sealed,
)
from services.audit.crosscheck import Expected, expected_trail, mismatched
from services.audit.incident_match import IncidentRecords
from services.audit.kept_rows import KeptRows
from services.audit.request_match import RequestRecords
from services.db.tables import AuditEvent, AuditHead

_events = cast(sa.Table, AuditEvent.__table__)
_head = cast(sa.Table, AuditHead.__table__)


class _Broken(Exception):
    def __init__(self, event: int | None, problem: str) -> None:
        super().__init__(problem)
        self.event = event
        self.problem = problem


@dataclass
class _Walk:
    key: bytes | None
    anchors: dict[int, Anchor]
    expected: Expected | None
    head_id: int | None  # the head read before the walk: its hash is noted on the way
    kept: KeptRows | None = None  # item digests to check against qb_change_items
    requests: RequestRecords | None = None  # change requests to match their events
    incidents: IncidentRecords | None = None  # incident rows and timers to match theirs
    prev: str = GENESIS
    checked: int = 0
    keyed: int = 0
    held: int = 0
    last_id: int | None = None
    head_hash: str | None = None
    _open: list[int] = field(default_factory=list)  # anchors not met yet, descending

    def __post_init__(self) -> None:
        self._open = sorted(self.anchors, reverse=True)

    def step(self, row: sa.RowMapping) -> None:
        event = int(row["id"])
        while self._open and self._open[-1] < event:
            gone = self.anchors[self._open.pop()]
            raise _Broken(
                gone.event,
                f"event {gone.event} of anchor {gone.short} is gone: events were deleted",
            )
        if row["prev_hash"] != self.prev:
            raise _Broken(
                event,
                f"event {event} does not follow the event before it: an event before it "
                "was deleted, inserted or reordered",
            )
        self._scheme(event, row["scheme"])
        if not sealed(row, self.key):
            first_keyed = row["scheme"] == HMAC_SHA256 and self.keyed == 0
            raise _Broken(
                event,
                f"event {event} was edited after it was written"
                + (
                    ", or QUEUEBOT_AUDIT_KEY is not the key the trail was written with"
                    if first_keyed
                    else ""
                ),
            )
        if self._open and self._open[-1] == event:
            anchor = self.anchors[self._open.pop()]
            if anchor.mac != row["hash"]:
                raise _Broken(
                    event,
                    f"event {event} does not match anchor {anchor.short}: the trail was "
                    f"rewritten (at event {event} or before it)",
                )
            self.held += 1
        if row["scheme"] == HMAC_SHA256:
            self.keyed += 1
        if event == self.head_id:
            self.head_hash = row["hash"]
        if self.expected is not None:
            self.expected.meet(row)
        if self.kept is not None:
            self.kept.meet(row)
        if self.requests is not None:
            self.requests.meet(row)
        if self.incidents is not None:
            self.incidents.meet(row)
        self.prev = row["hash"]
        self.last_id = event
        self.checked += 1

    def _scheme(self, event: int, scheme: str) -> None:
        if scheme not in SCHEMES:
            raise _Broken(event, f"event {event} has an unknown scheme {scheme!r}: it was edited")
        if scheme == HMAC_SHA256 and self.key is None:
            raise AuditKeyMissing(event=event, doing="verifying it")
        if scheme == SHA256 and self.key is not None and self.keyed:
            raise _Broken(
                event,
                f"event {event} is unkeyed (sha256) but follows keyed events: the trail was "
                "downgraded to rewrite it without the key",
            )

    def end(self) -> None:
        """Anchors the walk never reached name events past the end of the chain."""
        if not self._open:
            return
        anchor = self.anchors[self._open[0]]  # the furthest
        if self.last_id is None:
            raise _Broken(
                None,
                f"the audit trail is empty but anchor {anchor.short} says it had "
                f"{anchor.event} event(s): it was truncated",
            )
        raise _Broken(
            anchor.event,
            f"the chain ends at event {self.last_id} but anchor {anchor.short} names a later "
            "event: the newest events were deleted, or the trail was truncated",
        )


async def _read_head(conn: AsyncConnection) -> sa.RowMapping | None:
    return (await conn.execute(sa.select(_head).where(_head.c.id == 1))).mappings().first()


def _check_head(walk: _Walk, before: sa.RowMapping | None, after: sa.RowMapping | None) -> None:
    if before is None:
        if walk.checked and after is None:
            raise _Broken(None, "the audit head record is missing")
        return
    last_id = walk.last_id
    if walk.head_hash is None and last_id is None:
        raise _Broken(
            before["last_id"],
            f"the audit trail is empty but the head records event {before['last_id']}: "
            "it was truncated",
        )
    if walk.head_hash is None:  # the walk never met the event the head records
        raise _Broken(
            before["last_id"],
            f"the chain ends at event {last_id} but the head records event "
            f"{before['last_id']}: the latest events were deleted",
        )
    if walk.head_hash != before["last_hash"]:
        raise _Broken(
            before["last_id"],
            f"the head records event {before['last_id']} with another hash: the event was replaced",
        )
    if after is not None and last_id is not None and after["last_id"] < last_id:
        raise _Broken(
            after["last_id"] + 1,
            f"events after the head (event {after['last_id']}) up to event {last_id} were "
            "not written by queuebot's append (the head never moved to them)",
        )


async def verify_chain(
    conn: AsyncConnection,
    *,
    key: bytes | None,
    anchors: Iterable[Anchor] = (),
    cross_check: bool = True,
    batch: int = 5000,
    now: datetime | None = None,
) -> Verification:
    """``now``: when the scheduler's timers are judged (a reminder whose time has not come
    must still be scheduled); the wall clock unless given."""
    expected = await expected_trail(conn) if cross_check else None
    requests = RequestRecords() if cross_check else None
    incidents = IncidentRecords() if cross_check else None
    if requests is not None and incidents is not None:
        await requests.read(conn)
        await incidents.read(conn)
    before = await _read_head(conn)
    by_event: dict[int, Anchor] = {}
    for anchor in anchors:
        kept = by_event.setdefault(anchor.event, anchor)
        if kept.mac != anchor.mac:
            return Verification(
                0,
                anchor.event,
                f"anchors {kept.short} and {anchor.short} name the same event with "
                "different seals: one of them is not from this trail",
            )
    rows_kept = KeptRows() if cross_check else None
    walk = _Walk(
        key,
        by_event,
        expected,
        before["last_id"] if before else None,
        rows_kept,
        requests,
        incidents,
    )
    try:
        after_id = 0
        while True:
            rows = (
                (
                    await conn.execute(
                        sa.select(_events)
                        .where(_events.c.id > after_id)
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
                walk.step(row)
            after_id = rows[-1]["id"]
        walk.end()
        _check_head(walk, before, await _read_head(conn))
        mismatch = await rows_kept.problem(conn) if rows_kept is not None else None
        if mismatch is not None:
            raise _Broken(*mismatch)
    except _Broken as broken:
        return Verification(walk.checked, broken.event, broken.problem, walk.keyed, walk.held)
    records = expected.records if expected is not None else 0
    problem = expected.problem() if expected is not None else None
    if problem is None and requests is not None and incidents is not None:
        found = requests.found + incidents.problems(now or datetime.now(UTC))
        problem = mismatched(found)
    return Verification(
        walk.checked,
        None,
        problem,
        walk.keyed,
        walk.held,
        records,
        incidents.records if incidents is not None else 0,
    )
