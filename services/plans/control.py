"""Halting, resuming and rolling back a plan (the latter two after their own approval).

Each step runs in the caller's transaction (it takes the connection and never commits);
the chat posts it makes follow the commit (``announce``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.estate.estate import Estate
from services.estate.ops import PlanOps
from services.outbox import Outbox
from services.plans import store
from services.plans.model import (
    ACTIVE,
    ItemState,
    Note,
    PlanItemRow,
    PlanRow,
    PlanState,
    PlanView,
    WaveOutcome,
    Waves,
)
from services.plans.publish import announce
from services.plans.settle import Settled, finished, record_finished, settle


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
    ) -> PlanView:
        """Stop a running plan now: no further wave starts until a resume is approved."""
        plan = await store.lock_in(conn, number, states=(PlanState.RUNNING,), action="halt")
        note = f"halted by {actor.person or actor.account}" + (f": {reason}" if reason else "")
        await store.set_state(conn, number, PlanState.HALTED, note, now)
        # the tick stays: it counts the outcomes of the rows already out, starting nothing
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
        await announce(conn, self.outbox, number, [Note(note)], now=now)
        return view

    async def resume(
        self, conn: AsyncConnection, *, number: int, actor: Actor, request: int, now: datetime
    ) -> None:
        plan = await store.lock_in(conn, number, states=(PlanState.HALTED,), action="resume")
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
        await announce(conn, self.outbox, number, [Note(note)], now=now)

    async def rollback(
        self, conn: AsyncConnection, *, number: int, actor: Actor, request: int, now: datetime
    ) -> list[str]:
        """Return the plan's redriven jobs that no worker claimed yet to the dead letters,
        each with its own earlier values (the rollback's guard decides, row by row, at
        the moment of the change). What finished is counted (a row that succeeded is
        reported as succeeded, not rolled back); rows a worker holds are left alone and
        still counted as they finish."""
        plan = await store.lock_in(conn, number, states=ACTIVE, action="roll back")
        profile = self.estate.profile(plan.queue)
        items = await store.items_in(conn, number, state=ItemState.REDRIVEN)
        note = f"queuebot {plan.ref} rolled back (CR-{request}): {plan.reason}"[:1000]
        back = await profile.plan_ops.rollback(conn, items=store.refs(items), now=now, note=note)
        await store.mark(conn, number, back, ItemState.ROLLED_BACK)
        returned = set(back)
        # then what finished is counted (a row that succeeded is reported as succeeded),
        # the rows a worker claimed after the rollback's own guard among them; the rows of
        # the wave still out are those a worker holds
        settled = await _settle(conn, profile.plan_ops, plan)
        out = settled.held if settled else frozenset()
        held = [i for i in items if i.job_id not in returned and i.job_id in out]
        waves = _rolled_back(plan.waves, settled, items, returned, now)
        await store.save_waves(conn, number, waves, now)
        await self._record_finished(conn, plan, waves, now)
        summary = (
            f"rolled back by {actor.person} (CR-{request}): {len(back)} unclaimed job(s) "
            "returned to the dead letters"
        )
        if held:
            summary += (
                f"; {len(held)} claimed by a worker were left alone, and their outcome is "
                "still counted"
            )
        await store.set_state(conn, number, PlanState.ROLLED_BACK, summary, now)
        await _count_on_or_stop(conn, plan, bool(out), now)
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
        await announce(conn, self.outbox, number, [Note(summary)], now=now)
        return back

    async def _record_finished(
        self, conn: AsyncConnection, plan: PlanRow, waves: Waves, now: datetime
    ) -> None:
        """Each wave this step ended is audited as finished, as a tick's is."""
        before = {w.number: w.finished_at for w in plan.waves.waves}
        for wave in waves.waves:
            if wave.finished_at is not None and before.get(wave.number) is None:
                await record_finished(conn, self.audit, plan, wave, now)

    async def close_if_nothing_unclaimed(
        self,
        conn: AsyncConnection,
        *,
        number: int,
        actor: Actor,
        reason: str,
        now: datetime,
    ) -> PlanView | None:
        """A rollback with nothing to return needs no approval: when no redriven row of
        the plan is still unclaimed, close the plan now (no further wave starts; rows a
        worker holds are still counted as they finish). None when there are rows to roll
        back: then a rollback request, with its approval, is the way."""
        plan = await store.lock_in(conn, number, states=ACTIVE, action="roll back")
        profile = self.estate.profile(plan.queue)
        items = await store.items_in(conn, number, state=ItemState.REDRIVEN)
        if await profile.plan_ops.unclaimed(conn, items=store.refs(items)):
            return None
        settled = await _settle(conn, profile.plan_ops, plan)
        waves = plan.waves
        if settled is not None:  # counted now; ended when none of its rows is out
            waves = waves.with_wave(settled.wave if settled.open else finished(settled.wave, now))
        await store.save_waves(conn, number, waves, now)
        await self._record_finished(conn, plan, waves, now)
        out = settled is not None and settled.open > 0
        note = (
            f"closed by {actor.person or actor.account} ({reason}): nothing to roll back, "
            "no row of it is still unclaimed"
        )
        await store.set_state(conn, number, PlanState.CLOSED, note, now)
        await _count_on_or_stop(conn, plan, out, now)
        await self.audit.append(
            conn,
            action="plan.closed",
            actor=actor,
            at=now,
            subject=plan.ref,
            queue=plan.queue,
            incident=plan.incident,
            reason=reason,
            details={"unclaimed": 0, "still_out": out},
        )
        view = await store.view(conn, number)
        await announce(conn, self.outbox, number, [Note(note)], now=now)
        return view


async def _settle(conn: AsyncConnection, ops: PlanOps, plan: PlanRow) -> Settled | None:
    """The plan's current wave with the outcomes of its rows counted up to now (the waves
    before it ended before it started); None before its sample."""
    current = plan.waves.current
    return None if current is None else await settle(conn, ops, plan.id, current)


async def _count_on_or_stop(conn: AsyncConnection, plan: PlanRow, out: bool, now: datetime) -> None:
    """A plan that ends with rows still out keeps its tick, to count them as they finish."""
    if out:
        due = now + timedelta(seconds=plan.poll_seconds)
        await store.next_tick(conn, plan.id, due=due, now=now)
    else:
        await store.no_more_ticks(conn, plan.id)


def _rolled_back(
    waves: Waves,
    settled: Settled | None,
    items: list[PlanItemRow],
    returned: set[str],
    now: datetime,
) -> Waves:
    """The waves after a rollback: each says how many of its jobs went back to the dead
    letters, and one that gave jobs back ends as rolled back. A wave none of whose rows
    is out any more is finished as it stands (ok when all its rows succeeded): a wave is
    not called rolled back for a rollback that returned none of its rows."""
    if settled is not None:
        waves = waves.with_wave(settled.wave)
    out = settled is not None and settled.open > 0
    back = Counter(i.wave for i in items if i.job_id in returned)
    for wave in waves.waves:
        after = wave
        if back[wave.number]:
            after = after.model_copy(
                update={"rolled_back": back[wave.number], "outcome": WaveOutcome.ROLLED_BACK}
            )
        if not (out and settled is not None and wave.number == settled.wave.number):
            after = finished(after, now)
        waves = waves.with_wave(after)
    return waves
