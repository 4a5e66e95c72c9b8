"""The change request's rows: ``qb_change_requests`` and ``qb_approvals``, read and
written as typed records.

Every function here runs inside the caller's transaction: it takes the caller's
connection and never begins or commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.changes.model import ChangeView, Preview, RequestRow, RequestState
from services.db.tables import Approval, ChangeRequest
from services.errors import Conflict, NotFound, RequestDecided, RequestExpired
from services.estate import items
from services.estate.ops import Selector, Target
from services.estate.profile import as_utc

REQUESTS = cast(sa.Table, ChangeRequest.__table__)
APPROVALS = cast(sa.Table, Approval.__table__)
# Every column but the frozen targets of requests made before their rows were kept as
# items (``qb_change_items``); newer requests keep an empty list there.
_COLUMNS = [c for c in REQUESTS.c if c.name != "targets"]
EXPIRY = Actor.system("expiry")
# pending and not past its expiry at ``now``: what a pending request shows, and each
# approval it has (a row each; one with none where it has none), in one statement built
# once (the board asks for it again and again)
_PENDING = (
    sa.select(
        *(
            REQUESTS.c[name]
            for name in (
                "id",
                "kind",
                "queue",
                "requested_at",
                "expires_at",
                "requester_person",
                "reason",
                "incident",
                "evidence",
                "selector",
                "preview",
                "eligible_count",
                "approvals_required",
            )
        ),
        APPROVALS.c.person.label("approver"),
    )
    .select_from(
        REQUESTS.outerjoin(
            APPROVALS,
            sa.and_(APPROVALS.c.request_id == REQUESTS.c.id, APPROVALS.c.decision == "approve"),
        )
    )
    .where(
        REQUESTS.c.state == RequestState.PENDING.value,
        REQUESTS.c.expires_at > sa.bindparam("now", type_=REQUESTS.c.expires_at.type),
    )
    .order_by(REQUESTS.c.id, APPROVALS.c.id)
)


def _missing(number: int) -> NotFound:
    return NotFound(f"no change request CR-{number}; see /queue pending")


async def insert(conn: AsyncConnection, values: dict[str, Any]) -> int:
    # values as parameters, not in the statement, whose compiled form SQLAlchemy caches
    # with the statement itself: a large request's targets would stay in memory
    return int(
        (await conn.execute(REQUESTS.insert().returning(REQUESTS.c.id), values)).scalar_one()
    )


async def lock(conn: AsyncConnection, number: int) -> RequestRow:
    """The request's row, locked for this transaction (``UPDATE ... SET state = state``):
    approvers, rejecters and the expiry take turns on PostgreSQL (a row lock) and on
    SQLite (the write lock)."""
    locked = await conn.execute(
        REQUESTS.update()
        .where(REQUESTS.c.id == number)
        .values(state=REQUESTS.c.state)
        .returning(*_COLUMNS)
    )
    row = locked.mappings().first()
    if row is None:
        raise _missing(number)
    return RequestRow.from_row(row)


async def targets(conn: AsyncConnection, number: int) -> list[Target]:
    """The request's frozen targets, as execution needs them (keys and states); a request
    from before items is adopted first (``adopt_legacy``)."""
    return await items.targets(conn, number)


async def adopt_legacy(conn: AsyncConnection, number: int) -> None:
    """A request made before requests kept their rows as items kept its targets in its
    own JSON: copy them into items (keys and states; their images are in the request's
    audit event, and ``Target.from_json`` leaves each item's image empty), so that every
    request executes from its items."""
    stored = (
        await conn.execute(sa.select(REQUESTS.c.targets).where(REQUESTS.c.id == number))
    ).scalar_one()
    legacy = (stored or {}).get("items") or []
    if legacy and not await items.count(conn, number):
        await items.write(conn, request=number, targets=[Target.from_json(i) for i in legacy])


async def complete(conn: AsyncConnection, number: int, values: dict[str, Any]) -> None:
    """Write a request's row again once its rows are counted (a plan's request is written
    with its first page of rows and completed after its last)."""
    await conn.execute(REQUESTS.update().where(REQUESTS.c.id == number), values)


async def set_snapshot_hash(conn: AsyncConnection, number: int, value: str) -> None:
    await conn.execute(REQUESTS.update().where(REQUESTS.c.id == number).values(snapshot_hash=value))


async def due_for_expiry(conn: AsyncConnection, now: datetime) -> list[int]:
    found = await conn.execute(
        sa.select(REQUESTS.c.id).where(
            REQUESTS.c.state == RequestState.PENDING.value, REQUESTS.c.expires_at <= now
        )
    )
    return [int(n) for n in found.scalars().all()]


async def expire_due(conn: AsyncConnection, *, now: datetime, audit: AuditTrail) -> list[int]:
    """Mark every pending request past its expiry as expired (each with an audit event)."""
    expired = []
    for number in await due_for_expiry(conn, now):
        request = await lock(conn, number)
        if request.state is RequestState.PENDING:
            await expire(conn, request, now, audit=audit)
            expired.append(number)
    return expired


async def expire(
    conn: AsyncConnection, request: RequestRow, now: datetime, *, audit: AuditTrail
) -> None:
    await conn.execute(
        REQUESTS.update()
        .where(REQUESTS.c.id == request.id, REQUESTS.c.state == RequestState.PENDING.value)
        .values(state=RequestState.EXPIRED.value, decided_at=now)
    )
    await audit.append(
        conn,
        action="change.expired",
        actor=EXPIRY,
        at=now,
        subject=request.ref,
        queue=request.queue,
        incident=request.incident,
        details={"expires_at": request.expires_at},
    )


async def move(
    conn: AsyncConnection,
    number: int,
    *,
    to: RequestState,
    now: datetime,
    result: dict[str, Any] | None = None,
) -> bool:
    """pending -> ``to``; False when the request was no longer pending."""
    values: dict[str, Any] = {"state": to.value, "decided_at": now}
    if result is not None:
        values["result"] = result
    moved = await conn.execute(
        REQUESTS.update()
        .where(REQUESTS.c.id == number, REQUESTS.c.state == RequestState.PENDING.value)
        .values(**values)
    )
    return bool(moved.rowcount == 1)


async def save_result(conn: AsyncConnection, number: int, result: dict[str, Any]) -> None:
    # the result (every id changed) as a parameter, not in the cached statement
    await conn.execute(
        REQUESTS.update()
        .where(REQUESTS.c.id == number)
        .values(result=sa.bindparam("outcome", type_=REQUESTS.c.result.type)),
        {"outcome": result},
    )


async def approvers(conn: AsyncConnection, number: int) -> list[str]:
    rows = await conn.execute(
        sa.select(APPROVALS.c.person)
        .where(APPROVALS.c.request_id == number, APPROVALS.c.decision == "approve")
        .order_by(APPROVALS.c.id)
    )
    return [str(p) for p in rows.scalars().all()]


async def record_decision(  # noqa: PLR0917  # the row's columns, in order
    conn: AsyncConnection,
    number: int,
    actor: Actor,
    decision: str,
    now: datetime,
    basis: dict[str, Any] | None = None,
) -> None:
    """Who approved or rejected the request, from which platform account, when, and what
    their standing rested on (``basis``)."""
    await conn.execute(
        APPROVALS.insert().values(
            request_id=number,
            person=actor.person,
            platform=actor.platform,
            account=actor.account,
            decision=decision,
            at=now,
            basis=basis,
        )
    )


async def owner_approved(conn: AsyncConnection, number: int) -> bool:
    """Whether an approval of the request so far came from an owner of its queue."""
    rows = await conn.execute(
        sa.select(APPROVALS.c.basis).where(
            APPROVALS.c.request_id == number, APPROVALS.c.decision == "approve"
        )
    )
    return any(isinstance(b, dict) and b.get("owner_of") for b in rows.scalars().all())


async def already_decided(conn: AsyncConnection, request: RequestRow) -> Conflict:
    """The error for a decision on a request that is no longer pending."""
    if request.state is RequestState.EXPIRED:
        return RequestExpired(number=request.id, expired_at=request.expires_at)
    done = request.executed
    return RequestDecided(
        number=request.id,
        state=request.state.value,
        decided_at=request.decided_at,
        approvers=await approvers(conn, request.id) if done else (),
        changed=len(done.changed) if done else 0,
        skipped=len(done.skipped) if done else 0,
        rejected_by=request.rejection.rejected_by if request.rejection else None,
        rejection_reason=request.rejection.reason if request.rejection else None,
        withdrawn=bool(request.rejection and request.rejection.withdrawn),
    )


async def pending_numbers(conn: AsyncConnection, *, queue: str | None) -> list[int]:
    query = sa.select(REQUESTS.c.id).where(REQUESTS.c.state == RequestState.PENDING.value)
    if queue is not None:
        query = query.where(REQUESTS.c.queue == queue)
    return [int(n) for n in (await conn.execute(query.order_by(REQUESTS.c.id))).scalars().all()]


async def view(conn: AsyncConnection, number: int) -> ChangeView:
    row = (
        (await conn.execute(sa.select(*_COLUMNS).where(REQUESTS.c.id == number))).mappings().first()
    )
    if row is None:
        raise _missing(number)
    return _view(RequestRow.from_row(row), await approvers(conn, number))


async def pending_views(conn: AsyncConnection, *, now: datetime) -> list[ChangeView]:
    """Every request pending and not past its expiry at ``now``, oldest first, each with
    who approved it so far, without the rows it left alone (``ineligible``: not read): one
    statement however many there are. Only a read: one past its expiry is not shown, and
    left for the expiry to mark."""
    found: dict[int, tuple[sa.RowMapping, list[str]]] = {}
    for row in (await conn.execute(_PENDING, {"now": now})).mappings():
        _, approvals = found.setdefault(int(row["id"]), (row, []))
        if row["approver"] is not None:
            approvals.append(str(row["approver"]))
    return [_pending(row, approvals) for row, approvals in found.values()]


def _pending(row: sa.RowMapping, approvals: list[str]) -> ChangeView:
    preview = Preview.from_json(row["preview"])
    requested, expires = as_utc(row["requested_at"]), as_utc(row["expires_at"])
    assert requested is not None and expires is not None
    return ChangeView(
        number=int(row["id"]),
        kind=str(row["kind"]),
        queue=row["queue"],
        state=RequestState.PENDING,
        requester=row["requester_person"],
        requested_at=requested,
        expires_at=expires,
        reason=row["reason"],
        incident=row["incident"],
        evidence=row["evidence"],
        selector=Selector.from_json(row["selector"]).describe(),
        eligible=int(row["eligible_count"]),
        by_signature=preview.by_signature,
        ineligible=[],
        approvals_required=int(row["approvals_required"]),
        approvals=approvals,
        checks=preview.checks,
        schedule=preview.schedule,
        plan=preview.plan,
        incident_from=preview.incident_from,
    )


def _view(request: RequestRow, approvals: list[str]) -> ChangeView:
    preview = request.preview
    return ChangeView(
        number=request.id,
        kind=request.kind,
        queue=request.queue,
        state=request.state,
        requester=request.requester_person,
        requested_at=request.requested_at,
        expires_at=request.expires_at,
        reason=request.reason,
        incident=request.incident,
        evidence=request.evidence,
        selector=request.selector.describe(),
        eligible=request.eligible_count,
        by_signature=preview.by_signature,
        ineligible=request.ineligible,
        approvals_required=request.approvals_required,
        approvals=approvals,
        rejected_by=request.rejection.rejected_by if request.rejection else None,
        rejection_reason=request.rejection.reason if request.rejection else None,
        withdrawn=bool(request.rejection and request.rejection.withdrawn),
        checks=preview.checks,
        schedule=preview.schedule,
        plan=(request.executed.plan if request.executed else None) or preview.plan,
        incident_from=preview.incident_from,
        result=request.executed,
    )
