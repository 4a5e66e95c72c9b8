"""Halting, resuming and rolling back a plan (the latter two after their own approval)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services import audit, scheduler
from services.audit import Actor
from services.changes.plan_ops import ItemRef
from services.errors import Conflict
from services.plans.model import ACTIVE, PlanState, PlanView
from services.plans.store import ITEMS, TICK, PlanStore, plan_ops_for
from services.scheduler import FollowUp


class PlanControl(PlanStore):
    # -- halt, resume, rollback ------------------------------------------------------------

    async def halt(self, *, number: int, actor: Actor, reason: str | None) -> PlanView:
        now = self.clock()
        async with self.engine.begin() as conn:
            plan = await self._lock(conn, number)
            if plan["state"] != PlanState.RUNNING.value:
                raise Conflict(f"P-{number} is {plan['state']}, not running; nothing to halt")
            note = f"halted by {actor.person or actor.account}" + (f": {reason}" if reason else "")
            await self._set_state(conn, number, PlanState.HALTED, note, now)
            await scheduler.unschedule(conn, kind=TICK, subject=str(number))
            await audit.append(
                conn,
                action="plan.halted",
                actor=actor,
                at=now,
                subject=f"P-{number}",
                queue=plan["queue"],
                incident=plan["incident"],
                reason=reason,
                details={},
            )
            view = await self._view(conn, number)
        await self._publish(number, [("note", note)])()
        return view

    async def resume(
        self, conn: AsyncConnection, *, number: int, actor: Actor, request: int, now: datetime
    ) -> list[FollowUp]:
        plan = await self._lock(conn, number)
        if plan["state"] != PlanState.HALTED.value:
            raise Conflict(f"P-{number} is {plan['state']}, not halted; nothing to resume")
        note = f"resumed by {actor.person} (CR-{request})"
        await self._set_state(conn, number, PlanState.RUNNING, note, now)
        await self._next_tick(conn, number, now, now)
        await audit.append(
            conn,
            action="plan.resumed",
            actor=actor,
            at=now,
            subject=f"P-{number}",
            queue=plan["queue"],
            incident=plan["incident"],
            details={"request": f"CR-{request}"},
        )
        return [self._publish(number, [("note", note)])]

    async def rollback(
        self, conn: AsyncConnection, *, number: int, actor: Actor, request: int, now: datetime
    ) -> tuple[list[str], list[FollowUp]]:
        plan = await self._lock(conn, number)
        if plan["state"] not in ACTIVE:
            raise Conflict(
                f"P-{number} is {plan['state']}; only a running or halted plan can be rolled back"
            )
        rows = (
            (
                await conn.execute(
                    sa.select(ITEMS).where(ITEMS.c.plan_id == number, ITEMS.c.state == "redriven")
                )
            )
            .mappings()
            .all()
        )
        refs = [ItemRef(r["job_id"], r["message_id"], r["original"]) for r in rows]
        note = f"queuebot P-{number} rolled back (CR-{request}): {plan['reason']}"[:1000]
        back = await plan_ops_for(self._profile(plan)).rollback(
            conn, items=refs, now=now, note=note
        )
        await self._mark(conn, number, back, "rolled_back")
        returned = set(back)
        summary = (
            f"rolled back by {actor.person} (CR-{request}): {len(back)} unclaimed job(s) "
            f"returned to the dead letters; {len(rows) - len(back)} already claimed or "
            "finished were left alone"
        )
        await self._set_state(conn, number, PlanState.ROLLED_BACK, summary, now)
        await scheduler.unschedule(conn, kind=TICK, subject=str(number))
        await audit.append(
            conn,
            action="plan.rolled_back",
            actor=actor,
            at=now,
            subject=f"P-{number}",
            queue=plan["queue"],
            incident=plan["incident"],
            details={
                "request": f"CR-{request}",
                "rolled_back": back,
                "left_alone": [r["job_id"] for r in rows if r["job_id"] not in returned],
            },
        )
        return back, [self._publish(number, [("note", summary)])]
