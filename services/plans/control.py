"""Halting, resuming and rolling back a plan (the latter two after their own approval).

Each step runs in the caller's transaction (it takes the connection and never commits)
and returns the chat posts to make after the commit as follow-ups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.errors import PlanStateConflict
from services.estate.estate import Estate
from services.outbox import Outbox
from services.plans import store
from services.plans.model import (
    ACTIVE,
    ItemState,
    Note,
    PlanItemRow,
    PlanState,
    PlanView,
    WaveOutcome,
    Waves,
)
from services.plans.publish import announce
from services.scheduler import FollowUp


class PlanControl:
    def __init__(
        self,
        *,
        estate: Estate,
        clock: Callable[[], datetime],
        outbox: Outbox,
        audit: AuditTrail,
    ) -> None:
        self.audit = audit
        self.estate = estate
        self.clock = clock
        self.outbox = outbox

    async def halt(
        self,
        conn: AsyncConnection,
        *,
        number: int,
        actor: Actor,
        reason: str | None,
        now: datetime,
    ) -> tuple[PlanView, FollowUp]:
        """Stop a running plan now: no further wave starts until a resume is approved."""
        plan = await store.lock(conn, number)
        if plan.state is not PlanState.RUNNING:
            raise PlanStateConflict(
                number=number, state=plan.state, needed=(PlanState.RUNNING,), action="halt"
            )
        note = f"halted by {actor.person or actor.account}" + (f": {reason}" if reason else "")
        await store.set_state(conn, number, PlanState.HALTED, note, now)
        await store.no_more_ticks(conn, number)
        await self.audit.append(
            conn,
            action="plan.halted",
            actor=actor,
            at=now,
            subject=plan.ref,
            queue=plan.queue,
            incident=plan.incident,
            reason=reason,
            details={},
        )
        view = await store.view(conn, number)
        return view, await announce(conn, self.outbox, number, [Note(note)], now=now)

    async def resume(
        self, conn: AsyncConnection, *, number: int, actor: Actor, request: int, now: datetime
    ) -> list[FollowUp]:
        plan = await store.lock(conn, number)
        if plan.state is not PlanState.HALTED:
            raise PlanStateConflict(
                number=number, state=plan.state, needed=(PlanState.HALTED,), action="resume"
            )
        note = f"resumed by {actor.person} (CR-{request})"
        await store.set_state(conn, number, PlanState.RUNNING, note, now)
        await store.next_tick(conn, number, due=now, now=now)
        await self.audit.append(
            conn,
            action="plan.resumed",
            actor=actor,
            at=now,
            subject=plan.ref,
            queue=plan.queue,
            incident=plan.incident,
            details={"request": f"CR-{request}"},
        )
        return [await announce(conn, self.outbox, number, [Note(note)], now=now)]

    async def rollback(
        self, conn: AsyncConnection, *, number: int, actor: Actor, request: int, now: datetime
    ) -> tuple[list[str], list[FollowUp]]:
        """Return the plan's redriven jobs that no worker claimed yet to the dead letters,
        each with its own earlier values; the rest are left alone and listed."""
        plan = await store.lock(conn, number)
        if plan.state not in ACTIVE:
            raise PlanStateConflict(
                number=number, state=plan.state, needed=ACTIVE, action="roll back"
            )
        items = await store.items_in(conn, number, state=ItemState.REDRIVEN)
        note = f"queuebot {plan.ref} rolled back (CR-{request}): {plan.reason}"[:1000]
        profile = self.estate.profile(plan.queue)
        back = await profile.plan_ops.rollback(conn, items=store.refs(items), now=now, note=note)
        await store.mark(conn, number, back, ItemState.ROLLED_BACK)
        returned = set(back)
        await store.save_waves(conn, number, _rolled_back(plan.waves, items, returned, now), now)
        summary = (
            f"rolled back by {actor.person} (CR-{request}): {len(back)} unclaimed job(s) "
            f"returned to the dead letters; {len(items) - len(back)} already claimed or "
            "finished were left alone"
        )
        await store.set_state(conn, number, PlanState.ROLLED_BACK, summary, now)
        await store.no_more_ticks(conn, number)
        await self.audit.append(
            conn,
            action="plan.rolled_back",
            actor=actor,
            at=now,
            subject=plan.ref,
            queue=plan.queue,
            incident=plan.incident,
            details={
                "request": f"CR-{request}",
                "rolled_back": back,
                "left_alone": [i.job_id for i in items if i.job_id not in returned],
            },
        )
        return back, [await announce(conn, self.outbox, number, [Note(summary)], now=now)]


def _rolled_back(
    waves: Waves, items: list[PlanItemRow], returned: set[str], now: datetime
) -> Waves:
    """The waves after a rollback: each says how many of its jobs went back to the dead
    letters; a wave still out (or one that gave jobs back) ends as rolled back."""
    back = Counter(i.wave for i in items if i.job_id in returned)
    for wave in waves.waves:
        if back[wave.number] or wave.outcome is WaveOutcome.RUNNING:
            waves = waves.with_wave(
                wave.model_copy(
                    update={
                        "rolled_back": back[wave.number],
                        "outcome": WaveOutcome.ROLLED_BACK,
                        "finished_at": wave.finished_at or now,
                    }
                )
            )
    return waves
