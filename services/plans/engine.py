"""Staged redrive plans: the sample runs on approval, and every later wave is started by a
durable scheduler tick, only once the previous wave is all terminal, nothing in it
re-entered the dead-letter state or left the table with its outcome unknown, the
dead-letter count is not growing and the velocity cap allows. A re-dead-letter, or a job
gone from the table that may have failed, halts the plan; resuming needs a new approval.

Every step runs in the caller's transaction and locks the plan row first, so ticks from
several replicas, a halt and an approval take turns; the step, its audit event and the
next tick commit together. What a step has to say in chat comes back as follow-ups for
after the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.config import RedriveConfig
from services.estate.estate import Estate
from services.estate.ops import Action, Target
from services.outbox import Outbox
from services.plans import store
from services.plans.candidates import wave_schedule
from services.plans.model import (
    ItemState,
    News,
    Note,
    PlanRow,
    PlanState,
    Wave,
    WaveFinished,
    WaveOutcome,
    WaveStarted,
)
from services.plans.publish import announce
from services.plans.settle import (
    SYSTEM,
    Settled,
    completed_words,
    finished,
    halt_cause,
    record_finished,
    settle,
    unknown_words,
)


class PlanEngine:
    """Starting and advancing plans (what a plan would take is ``candidates``'s)."""

    def __init__(
        self,
        *,
        estate: Estate,
        config: RedriveConfig,
        clock: Callable[[], datetime],
        outbox: Outbox,
        audit: AuditTrail,
    ) -> None:
        self.audit = audit
        self.estate = estate
        self.config = config
        self.clock = clock
        self.outbox = outbox

    # -- approval -> the sample ------------------------------------------------------

    async def start(
        self,
        conn: AsyncConnection,
        *,
        request: int,
        queue: str,
        reason: str,
        incident: str | None,
        requester: str,
        approvers: list[str],
        origin: dict[str, Any],
        sample: int | None,
        actor: Actor,
        now: datetime,
        overridden: Sequence[Sequence[str]] = (),
    ) -> int:
        """A plan for the approved request's frozen rows (its items, copied by the
        database), its sample started now.
        ``overridden``: the request's failed checks its requester overrode (name, detail),
        named in the plan's ``plan.started`` event."""
        profile = self.estate.profile(queue)
        await store.ensure_no_active_plan(conn, profile.queue)
        total = await store.request_items(conn, request)
        schedule = wave_schedule(self.config, total, sample)
        number = await store.insert_plan(
            conn,
            {
                "queue": profile.queue,
                "profile": profile.name,
                "request_id": request,
                "state": PlanState.RUNNING.value,
                "reason": reason,
                "incident": incident,
                "requester": requester,
                "approvers": {"people": approvers},
                "sample": schedule[0],
                "max_wave": self.config.max_wave,
                "velocity": self.config.velocity,
                "poll_seconds": self.config.poll_seconds,
                "total": total,
                "cursor": 0,
                "wave": -1,
                "wave_size": 0,
                "wave_started_at": None,
                "dead_at_wave_start": 0,
                "waves": {"schedule": schedule, "waves": []},
                "note": None,
                "origin": origin,
                "message_ref": None,
                "created_at": now,
                "updated_at": now,
            },
        )
        await store.items_from_request(conn, plan=number, request=request, total=total)
        await self.audit.append(
            conn,
            action="plan.started",
            actor=actor,
            at=now,
            subject=f"P-{number}",
            queue=profile.queue,
            incident=incident,
            reason=reason,
            details={
                "request": f"CR-{request}",
                "total": total,
                "schedule": schedule,
                "approvers": approvers,
                **({"overridden": [list(c) for c in overridden]} if overridden else {}),
            },
        )
        plan = await store.lock(conn, number)
        await self._start_wave(conn, plan, now, actor)
        return number

    # -- the scheduler's tick ----------------------------------------------------------

    async def tick(self, conn: AsyncConnection, subject: str, now: datetime) -> None:
        """The scheduler's step for one plan: settle the wave out (its rows' outcomes are
        counted whatever the plan's state), then, in a running plan, start the next wave
        when every condition allows, or come back later."""
        plan = await store.lock(conn, int(subject))
        if plan.state is PlanState.COMPLETED:
            return
        news: list[News] = []
        waves = plan.waves
        current = waves.current
        if current is not None:
            ops = self.estate.profile(plan.queue).plan_ops
            settled = await settle(conn, ops, plan.id, current)
            if (settled.redead or settled.unknown) and plan.state is PlanState.RUNNING:
                await self._halt(conn, plan, settled, now)
                return
            current = settled.wave
            ends = not settled.open and current.finished_at is None
            if ends:
                current = finished(current, now)
            if current != waves.current:
                waves = waves.with_wave(current)
                await store.save_waves(conn, plan.id, waves, now)
            if ends:
                await record_finished(conn, self.audit, plan, current, now)
                news.append(WaveFinished(current.number))
            if settled.open or plan.state is not PlanState.RUNNING:
                if settled.open:  # come back to count the rest
                    await store.next_tick(conn, plan.id, due=now + _poll(plan), now=now)
                if news:
                    await announce(conn, self.outbox, plan.id, news, now=now)
                return
        if plan.cursor >= plan.total:
            done = completed_words(waves.waves)
            await store.set_state(conn, plan.id, PlanState.COMPLETED, done, now)
            await self.audit.append(
                conn,
                action="plan.completed",
                actor=SYSTEM,
                at=now,
                subject=plan.ref,
                queue=plan.queue,
                incident=plan.incident,
                details={"total": plan.total},
            )
            await announce(conn, self.outbox, plan.id, news, now=now)
            return
        dead_now: int | None = None
        if current is not None:
            dead_now = await self.estate.profile(plan.queue).dead_rows(conn)
            waiting = self._wait_reason(plan, current, dead_now, now)
            if waiting is not None:
                due, note = waiting
                if note is not None and plan.note != note:
                    await store.set_note(conn, plan.id, note, now)
                    news.append(Note(note))
                await store.next_tick(conn, plan.id, due=due, now=now)
                if news:
                    await announce(conn, self.outbox, plan.id, news, now=now)
                return
        plan = replace(plan, waves=waves)
        await self._start_wave(conn, plan, now, SYSTEM, news, dead=dead_now)

    def _wait_reason(
        self, plan: PlanRow, current: Wave, dead_now: int, now: datetime
    ) -> tuple[datetime, str | None] | None:
        """When the next wave may not start yet: (when to look again, a note or None)."""
        # The last wave took `changed` rows out of the dead letters; those that came back
        # (`redead`, when it halted and was resumed) are counted again, not as new growth.
        expected = plan.dead_at_wave_start - (current.changed - current.redead)
        if dead_now > expected:
            note = (
                f"waiting: {dead_now - expected:,} new dead letter(s) since "
                f"{current.label} started; the next wave starts when the count stops "
                "growing"
            )
            return now + _poll(plan), note
        earliest = (plan.wave_started_at or now) + timedelta(seconds=current.size / plan.velocity)
        if now < earliest:
            return earliest, None
        return None

    async def _start_wave(
        self,
        conn: AsyncConnection,
        plan: PlanRow,
        now: datetime,
        actor: Actor,
        news: list[News] | None = None,
        *,
        dead: int | None = None,
    ) -> None:
        """Start the plan's next wave. ``dead``: the dead letters this tick counted already
        (in this transaction), taken as the count at the wave's start."""
        profile = self.estate.profile(plan.queue)
        ops = profile.plan_ops
        wave_no = len(plan.waves.waves)
        schedule = plan.waves.schedule
        size = schedule[wave_no] if wave_no < len(schedule) else plan.max_wave
        items = await store.next_items(conn, plan, size)
        originals = await ops.originals(conn, items=store.refs(items))
        dead_before = dead if dead is not None else await profile.dead_rows(conn)
        targets = [
            Target(
                id=i.job_id,
                key={},
                state=str(i.original["status"]),
                signature=i.signature,
                row={},
                part=i.part,
            )
            for i in items
        ]
        label = "sample" if wave_no == 0 else f"wave {wave_no}"
        note = f"queuebot {plan.ref} {label} (CR-{plan.request_id}): {plan.reason}"[:1000]
        applied = await profile.changes.apply(
            conn, action=Action.REDRIVE, targets=targets, now=now, note=note, duplicates=False
        )
        changed = set(applied.changed)
        await ops.log_redrives(conn, job_ids=applied.changed, now=now)
        await store.record_wave_items(
            conn,
            number=plan.id,
            updates=[
                (
                    i.seq,
                    wave_no,
                    ItemState.REDRIVEN if i.job_id in changed else ItemState.SKIPPED,
                    originals.get(i.part or i.job_id, i.original),
                )
                for i in items
            ],
        )
        wave = Wave(
            number=wave_no,
            size=len(items),
            changed=len(changed),
            skipped=len(items) - len(changed),
            started_at=now,
        )
        await store.wave_started(
            conn,
            plan,
            taken=len(items),
            waves=plan.waves.with_wave(wave),
            dead_before=dead_before,
            now=now,
        )
        await self.audit.append(
            conn,
            action="plan.wave_started",
            actor=actor,
            at=now,
            subject=plan.ref,
            queue=plan.queue,
            incident=plan.incident,
            reason=plan.reason,
            details={
                "wave": wave_no,
                "changed": applied.changed,
                "skipped": [[s.id, s.why] for s in applied.skipped],
                "job_events": applied.job_events,
                "before": [image for _, image in applied.before],
            },
        )
        await store.next_tick(conn, plan.id, due=now + _poll(plan), now=now)
        started = [*(news or []), WaveStarted(wave_no)]
        await announce(conn, self.outbox, plan.id, started, now=now)

    async def _halt(
        self, conn: AsyncConnection, plan: PlanRow, settled: Settled, now: datetime
    ) -> None:
        """A row of the wave died again, or a job of it left the table where that may mean
        it failed: halt the plan, saying whether a failure is the one the plan was for, and
        why a job gone from the table has an unknown outcome. The wave's other rows are
        still counted as they finish."""
        current = settled.wave
        redead = settled.redead
        profile = self.estate.profile(plan.queue)
        said: list[str] = []
        cause = None
        if redead:
            originals = await store.signatures_of_wave(conn, plan.id, current.number)
            cause = halt_cause(settled, originals, profile.no_error_text)
            said.append(
                f"{len(redead)} job(s) of {current.label} re-entered the dead-letter state; "
                f"{cause.words}"
            )
        if settled.unknown:
            said.append(
                unknown_words(
                    current, len(settled.unknown), profile.deleted_jobs, more=bool(redead)
                )
            )
        note = f"HALTED: {'. '.join(said)}. Nothing more is redriven."
        halted = current.model_copy(
            update={
                "outcome": WaveOutcome.HALTED,
                "finished_at": None if settled.open else now,
            }
        )
        await store.save_waves(conn, plan.id, plan.waves.with_wave(halted), now)
        await store.set_state(conn, plan.id, PlanState.HALTED, note, now)
        if settled.open:  # the rest of the wave is still counted
            await store.next_tick(conn, plan.id, due=now + _poll(plan), now=now)
        else:
            await record_finished(conn, self.audit, plan, halted, now)
        await self.audit.append(
            conn,
            action="plan.halted",
            actor=SYSTEM,
            at=now,
            subject=plan.ref,
            queue=plan.queue,
            incident=plan.incident,
            reason=note,
            details={
                "redead": [[j, e] for j, e in redead],
                "same_signature": cause.same if cause else [],
                "cause_unread": cause.unread if cause else [],
                **({"unknown": settled.unknown} if settled.unknown else {}),
            },
        )
        halted_news: list[News] = [Note(note)]
        if not settled.open:
            halted_news.insert(0, WaveFinished(current.number))
        await announce(conn, self.outbox, plan.id, halted_news, now=now)


def _poll(plan: PlanRow) -> timedelta:
    return timedelta(seconds=plan.poll_seconds)
