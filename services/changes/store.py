"""Change-request storage: locking a request, expiring it, its approvers, and the view
commands show. ``ChangeRequests`` builds on it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import audit
from services.audit import Actor
from services.changes.model import (
    ChangeKind,
    ChangeView,
    Ineligible,
    RequestState,
    Selector,
    Target,
)
from services.changes.ops import changes_for
from services.config import ApprovalConfig, RedriveConfig
from services.errors import NotFound, PreconditionFailed
from services.estate.estate import Estate
from services.estate.profile import as_utc
from services.models import Approval, ChangeRequest
from services.plans.engine import PlanEngine

_cr = cast(sa.Table, ChangeRequest.__table__)
_ap = cast(sa.Table, Approval.__table__)


class RequestStore:
    def __init__(
        self,
        *,
        estate: Estate,
        state_engine: AsyncEngine,
        approval: ApprovalConfig,
        clock: Callable[[], datetime],
        plans: PlanEngine | None = None,
    ) -> None:
        self.estate = estate
        self.state_engine = state_engine
        self.approval = approval
        self.clock = clock
        self.plans = plans or PlanEngine(
            estate=estate,
            engine=state_engine,
            config=RedriveConfig(),
            clock=clock,
            changes_for=changes_for,
        )

    def _engine(self) -> AsyncEngine:
        if self.estate.engine.url != self.state_engine.url:
            raise PreconditionFailed(
                "queuebot changes queue rows only when its own tables live in the queue's "
                "database, so the change and its audit event commit together. Point "
                "QUEUEBOT_DATABASE_URL at the queue database (queuebot's tables are "
                "prefixed qb_)."
            )
        return self.state_engine

    async def expire_due(self) -> list[int]:
        """Mark every pending request past its expiry as expired (with an audit event)."""
        async with self._engine().begin() as conn:
            return await self.expire_due_in(conn, self.clock())

    async def expire_due_in(self, conn: AsyncConnection, now: datetime) -> list[int]:
        due = (
            (
                await conn.execute(
                    sa.select(_cr.c.id).where(
                        _cr.c.state == RequestState.PENDING.value,
                        _cr.c.expires_at <= now,
                    )
                )
            )
            .scalars()
            .all()
        )
        expired = []
        for number in due:
            cr = await self._lock(conn, int(number))
            if cr["state"] == RequestState.PENDING.value:
                await self._expire(conn, cr, now)
                expired.append(int(number))
        return expired

    async def pending(self, *, queue: str | None = None) -> list[ChangeView]:
        await self.expire_due()
        async with self.state_engine.connect() as conn:
            query = sa.select(_cr.c.id).where(_cr.c.state == RequestState.PENDING.value)
            if queue is not None:
                query = query.where(_cr.c.queue == self.estate.profile(queue).queue)
            numbers = (await conn.execute(query.order_by(_cr.c.id))).scalars().all()
            return [await self._view(conn, int(n)) for n in numbers]

    async def get(self, *, number: int) -> ChangeView:
        async with self.state_engine.connect() as conn:
            return await self._view(conn, number)

    # -- helpers ---------------------------------------------------------------------

    async def _lock(self, conn: AsyncConnection, number: int) -> dict[str, Any]:
        locked = await conn.execute(
            _cr.update().where(_cr.c.id == number).values(state=_cr.c.state).returning(*_cr.c)
        )
        row = locked.mappings().first()
        if row is None:
            raise NotFound(f"no change request CR-{number}; see /queue pending")
        return dict(row)

    async def _expire(self, conn: AsyncConnection, cr: dict[str, Any], now: datetime) -> None:
        await conn.execute(
            _cr.update()
            .where(
                _cr.c.id == cr["id"],
                _cr.c.state == RequestState.PENDING.value,
            )
            .values(state=RequestState.EXPIRED.value, decided_at=now)
        )
        await audit.append(
            conn,
            action="change.expired",
            actor=Actor.system("expiry"),
            at=now,
            subject=f"CR-{cr['id']}",
            queue=cr["queue"],
            incident=cr["incident"],
            details={"expires_at": cr["expires_at"]},
        )

    async def _approvers(self, conn: AsyncConnection, number: int) -> list[str]:
        return [
            str(p)
            for p in (
                await conn.execute(
                    sa.select(_ap.c.person)
                    .where(_ap.c.request_id == number, _ap.c.decision == "approve")
                    .order_by(_ap.c.id)
                )
            )
            .scalars()
            .all()
        ]

    async def _already(self, conn: AsyncConnection, cr: dict[str, Any]) -> str:
        number, state = cr["id"], cr["state"]
        when = _hm(cr["decided_at"])
        if state == RequestState.EXECUTED.value:
            who = ", ".join(await self._approvers(conn, number))
            res = cr["result"] or {}
            return (
                f"CR-{number} was already approved by {who} at {when} and executed: "
                f"{len(res.get('changed', []))} row(s) changed, "
                f"{len(res.get('skipped', []))} skipped. Nothing more was done."
            )
        if state == RequestState.REJECTED.value:
            rejecter = (cr["result"] or {}).get("rejected_by")
            return f"CR-{number} was rejected by {rejecter} at {when}; nothing was changed."
        return f"CR-{number} expired at {_hm(cr['expires_at'])}; request it again if needed."

    async def _view(self, conn: AsyncConnection, number: int) -> ChangeView:
        columns = [c for c in _cr.c if c.name != "targets"]  # ten thousand keys, not needed
        cr = (await conn.execute(sa.select(*columns).where(_cr.c.id == number))).mappings().first()
        if cr is None:
            raise NotFound(f"no change request CR-{number}; see /queue pending")
        approvals = await self._approvers(conn, number)
        signatures = [(str(sig), int(n)) for sig, n in cr["preview"]["by_signature"]]
        result = cr["result"]
        return ChangeView(
            number=int(cr["id"]),
            kind=ChangeKind(cr["kind"]),
            queue=cr["queue"],
            state=RequestState(cr["state"]),
            requester=cr["requester_person"],
            requested_at=_aware(cr["requested_at"]),
            expires_at=_aware(cr["expires_at"]),
            reason=cr["reason"],
            incident=cr["incident"],
            evidence=cr["evidence"],
            selector=Selector.from_json(cr["selector"]).describe(),
            eligible=int(cr["eligible_count"]),
            by_signature=signatures,
            ineligible=[Ineligible(i, w) for i, w in cr["ineligible"]["items"]],
            approvals_required=int(cr["approvals_required"]),
            approvals=approvals,
            rejected_by=(result or {}).get("rejected_by") if cr["state"] == "rejected" else None,
            checks=[(str(n), str(v), str(d)) for n, v, d in cr["preview"].get("checks", [])],
            schedule=list(cr["preview"].get("schedule", [])),
            plan=(result or {}).get("plan") or cr["preview"].get("plan"),
            result=result,
        )


def _target_json(t: Target) -> dict[str, Any]:
    return {"id": t.id, "key": t.key, "state": t.state, "signature": t.signature, "row": t.row}


def _target_from(item: dict[str, Any]) -> Target:
    return Target(
        id=item["id"],
        key=item["key"],
        state=item["state"],
        signature=item["signature"],
        row={},
    )


def _aware(value: datetime) -> datetime:
    out = as_utc(value)
    assert out is not None
    return out


def _hm(value: datetime | None) -> str:
    return _aware(value).strftime("%H:%M UTC") if value else "-"


def _nothing_to_do(kind: ChangeKind, selector: Selector, ineligible: list[Ineligible]) -> str:
    if not ineligible:
        return f"nothing to {kind.value}: no rows match {selector.describe()}"
    listed = "; ".join(f"{i.id}: {i.why}" for i in ineligible[:10])
    more = f" (and {len(ineligible) - 10} more)" if len(ineligible) > 10 else ""
    return f"nothing to {kind.value}: every row named is ineligible ({listed}{more})"
