"""Staged redrive plans (SPEC §7): the sample runs on approval, and every later wave is
started by a durable scheduler tick, only once the previous wave is all terminal, nothing
in it re-entered the dead-letter state, the dead-letter count is not growing and the
velocity cap allows. A re-dead-letter halts the plan; resuming needs a new approval.

Every step locks the plan row first (``UPDATE ... SET state = state``), so ticks from
several replicas, a halt and an approval serialise; the step, its audit event and the
next tick commit together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import audit, scheduler
from services.audit import Actor
from services.changes.message_job_plans import MessageJobPlanOps
from services.changes.model import ChangeKind, Ineligible, Selector, Target
from services.changes.ops import ChangeOps
from services.changes.plan_ops import ItemRef, PlanOps
from services.changes.worker_queue import WorkerQueuePlanOps
from services.config import RedriveConfig
from services.errors import Conflict, NotFound
from services.estate.estate import Estate
from services.estate.message_job import MessageJobProfile
from services.estate.profile import QueueProfile, as_utc
from services.estate.signature import display_signature, error_signature
from services.models import Plan, PlanItem
from services.notify import ChannelRef, MessageRef, Notifier
from services.plans import messages
from services.plans.model import ACTIVE, PlanState, PlanView, Wave, wave_sizes
from services.plans.preconditions import Evaluation, evaluate
from services.scheduler import FollowUp

TICK = "plan.tick"
_plans = cast(sa.Table, Plan.__table__)
_items = cast(sa.Table, PlanItem.__table__)
SYSTEM = Actor.system("plan")


def plan_ops_for(profile: QueueProfile) -> PlanOps:
    if isinstance(profile, MessageJobProfile):
        return MessageJobPlanOps(profile)
    from services.estate.worker_queue import WorkerQueueProfile

    assert isinstance(profile, WorkerQueueProfile)
    return WorkerQueuePlanOps(profile)


class PlanEngine:
    def __init__(
        self,
        *,
        estate: Estate,
        engine: AsyncEngine,
        config: RedriveConfig,
        clock: Callable[[], datetime],
        changes_for: Callable[[QueueProfile], ChangeOps],
        notifier: Notifier | None = None,
    ) -> None:
        self.estate = estate
        self.engine = engine
        self.config = config
        self.clock = clock
        self.changes_for = changes_for
        self.notifier = notifier

    # -- requesting ------------------------------------------------------------------

    async def candidates(
        self,
        conn: AsyncConnection,
        *,
        profile: QueueProfile,
        selector: Selector,
        reason: str,
        staged: bool,
        limit: int | None,
    ) -> tuple[list[Target], list[Ineligible], Evaluation]:
        """The frozen candidates of a redrive, checked; named ids or a bulk selector."""
        ops = plan_ops_for(profile)
        if selector.bulk or (staged and selector.failure_reason is not None):
            ids = tuple(await ops.candidate_ids(conn, selector=selector))
        else:
            ids = tuple(dict.fromkeys(selector.ids))
        frozen = await self.changes_for(profile).freeze(
            conn, kind=ChangeKind.REDRIVE, selector=Selector(ids=ids)
        )
        evaluation = await evaluate(
            conn,
            profile=profile,
            ops=ops,
            targets=frozen.targets,
            reason=reason,
            config=self.config,
            now=self.clock(),
            staged=staged,
        )
        eligible = evaluation.eligible
        excluded = [*frozen.ineligible, *evaluation.excluded]
        if limit is not None and len(eligible) > limit:
            excluded.append(
                Ineligible(
                    f"{len(eligible) - limit} more", f"beyond --max {limit}; not part of this plan"
                )
            )
            eligible = eligible[:limit]
        return eligible, excluded, evaluation

    def schedule_for(self, total: int, sample: int | None) -> list[int]:
        return wave_sizes(
            total,
            sample=sample or self.config.sample,
            first=self.config.first_wave,
            cap=self.config.max_wave,
        )

    async def active_plan(self, conn: AsyncConnection, queue: str) -> int | None:
        found = await conn.execute(
            sa.select(_plans.c.id).where(_plans.c.queue == queue, _plans.c.state.in_(ACTIVE))
        )
        row = found.first()
        return int(row[0]) if row else None

    # -- approval -> the sample ------------------------------------------------------

    async def start(
        self,
        conn: AsyncConnection,
        *,
        cr: dict[str, Any],
        approvers: list[str],
        actor: Actor,
        now: datetime,
    ) -> tuple[int, list[FollowUp]]:
        profile = self.estate.profile(cr["queue"])
        running = await self.active_plan(conn, profile.queue)
        if running is not None:
            raise Conflict(
                f"queue {profile.queue} already has an active plan, P-{running}; "
                "one plan per queue (halt or roll it back first)"
            )
        items = cr["targets"]["items"]
        sample = cr["selector"].get("sample")
        schedule = self.schedule_for(len(items), sample)
        number = (
            await conn.execute(
                _plans.insert()
                .values(
                    queue=profile.queue,
                    profile=profile.name,
                    request_id=cr["id"],
                    state=PlanState.RUNNING.value,
                    reason=cr["reason"],
                    incident=cr["incident"],
                    requester=cr["requester_person"],
                    approvers={"people": approvers},
                    sample=schedule[0],
                    max_wave=self.config.max_wave,
                    velocity=self.config.velocity,
                    poll_seconds=self.config.poll_seconds,
                    total=len(items),
                    cursor=0,
                    wave=-1,
                    wave_size=0,
                    wave_started_at=None,
                    dead_at_wave_start=0,
                    waves={"schedule": schedule, "waves": []},
                    note=None,
                    origin=cr["origin"],
                    message_ref=None,
                    created_at=now,
                    updated_at=now,
                )
                .returning(_plans.c.id)
            )
        ).scalar_one()
        await conn.execute(
            _items.insert(),
            [
                {
                    "plan_id": number,
                    "seq": seq,
                    "job_id": str(item["id"]),
                    "message_id": item["key"].get("message_id"),
                    "wave": None,
                    "state": "waiting",
                    "signature": item["signature"],
                    "original": {"status": item["state"]},
                }
                for seq, item in enumerate(items)
            ],
        )
        await audit.append(
            conn,
            action="plan.started",
            actor=actor,
            at=now,
            subject=f"P-{number}",
            queue=profile.queue,
            incident=cr["incident"],
            reason=cr["reason"],
            details={
                "request": f"CR-{cr['id']}",
                "total": len(items),
                "schedule": schedule,
                "approvers": approvers,
            },
        )
        plan = await self._lock(conn, int(number))
        follow = await self._start_wave(conn, plan, now, actor)
        return int(number), follow

    # -- the scheduler's tick ----------------------------------------------------------

    async def tick(self, conn: AsyncConnection, subject: str, now: datetime) -> list[FollowUp]:
        plan = await self._lock(conn, int(subject))
        if plan["state"] != PlanState.RUNNING.value:
            return []
        number = plan["id"]
        waves: list[dict[str, Any]] = plan["waves"]["waves"]
        posts: list[Any] = []
        current = waves[-1] if waves else None
        if current is not None and current["outcome"] == "running":
            refs = await self._wave_items(conn, number, current["number"])
            status = await plan_ops_for(self._profile(plan)).wave_status(conn, items=refs)
            if status.redead:
                return await self._halt_on_redead(conn, plan, current, status.redead, now)
            if status.open:
                await self._next_tick(conn, number, now + self._poll(plan), now)
                return []
            await self._mark(conn, number, status.succeeded, "succeeded")
            current.update(
                outcome="ok", finished_at=now.isoformat(), succeeded=len(status.succeeded)
            )
            await self._save_waves(conn, plan, waves, now)
            await audit.append(
                conn,
                action="plan.wave_finished",
                actor=SYSTEM,
                at=now,
                subject=f"P-{number}",
                queue=plan["queue"],
                incident=plan["incident"],
                details={"wave": current["number"], "succeeded": status.succeeded},
            )
            posts.append(("finished", current["number"]))
        if plan["cursor"] >= plan["total"]:
            await conn.execute(
                _plans.update()
                .where(_plans.c.id == number)
                .values(
                    state=PlanState.COMPLETED.value, note="every wave succeeded", updated_at=now
                )
            )
            await audit.append(
                conn,
                action="plan.completed",
                actor=SYSTEM,
                at=now,
                subject=f"P-{number}",
                queue=plan["queue"],
                incident=plan["incident"],
                details={"total": plan["total"]},
            )
            return [self._publish(number, posts)]
        profile = self._profile(plan)
        dead_now = await self._dead(conn, profile)
        expected = plan["dead_at_wave_start"] - (current["changed"] if current else 0)
        if current is not None and dead_now > expected:
            note = (
                f"waiting: {dead_now - expected:,} new dead letter(s) since "
                f"{current['label']} started; the next wave starts when the count stops "
                "growing"
            )
            if plan["note"] != note:
                await conn.execute(
                    _plans.update().where(_plans.c.id == number).values(note=note, updated_at=now)
                )
                posts.append(("note", note))
            await self._next_tick(conn, number, now + self._poll(plan), now)
            return [self._publish(number, posts)] if posts else []
        if current is not None:
            earliest = (as_utc(plan["wave_started_at"]) or now) + timedelta(
                seconds=current["size"] / plan["velocity"]
            )
            if now < earliest:
                await self._next_tick(conn, number, earliest, now)
                return [self._publish(number, posts)] if posts else []
        return [*(await self._start_wave(conn, plan, now, SYSTEM, posts))]

    async def _start_wave(
        self,
        conn: AsyncConnection,
        plan: dict[str, Any],
        now: datetime,
        actor: Actor,
        posts: list[Any] | None = None,
    ) -> list[FollowUp]:
        number = plan["id"]
        profile = self._profile(plan)
        ops = plan_ops_for(profile)
        schedule: list[int] = plan["waves"]["schedule"]
        waves: list[dict[str, Any]] = plan["waves"]["waves"]
        wave_no = len(waves)
        size = schedule[wave_no] if wave_no < len(schedule) else self.config.max_wave
        rows = (
            (
                await conn.execute(
                    sa.select(_items)
                    .where(_items.c.plan_id == number, _items.c.seq >= plan["cursor"])
                    .order_by(_items.c.seq)
                    .limit(size)
                )
            )
            .mappings()
            .all()
        )
        refs = [ItemRef(r["job_id"], r["message_id"], {}) for r in rows]
        originals = await ops.originals(conn, items=refs)
        dead_before = await self._dead(conn, profile)
        targets = [
            Target(
                id=r["job_id"],
                key=(
                    {"job_id": r["job_id"], "message_id": r["message_id"]}
                    if r["message_id"]
                    else {"id": r["job_id"]}
                ),
                state=(
                    r["original"].get("status", "DLQ/FAILED")
                    if not r["message_id"]
                    else "DLQ/FAILED"
                ),
                signature=r["signature"],
                row={},
            )
            for r in rows
        ]
        label = "sample" if wave_no == 0 else f"wave {wave_no}"
        note = (f"queuebot P-{number} {label} (CR-{plan['request_id']}): {plan['reason']}")[:1000]
        applied = await self.changes_for(profile).apply(
            conn, kind=ChangeKind.REDRIVE, targets=targets, now=now, note=note, duplicates=False
        )
        changed = set(applied.changed)
        await ops.log_redrives(conn, job_ids=applied.changed, now=now)
        updates = [
            {
                "p": number,
                "s": r["seq"],
                "w": wave_no,
                "st": "redriven" if r["job_id"] in changed else "skipped",
                "o": originals.get(r["job_id"], r["original"]),
            }
            for r in rows
        ]
        if updates:
            await conn.execute(
                _items.update()
                .where(_items.c.plan_id == sa.bindparam("p"), _items.c.seq == sa.bindparam("s"))
                .values(
                    wave=sa.bindparam("w"), state=sa.bindparam("st"), original=sa.bindparam("o")
                ),
                updates,
            )
        wave = {
            "number": wave_no,
            "label": label,
            "size": len(rows),
            "changed": len(changed),
            "skipped": len(rows) - len(changed),
            "started_at": now.isoformat(),
            "finished_at": None,
            "succeeded": 0,
            "redead": 0,
            "outcome": "running",
        }
        waves.append(wave)
        await conn.execute(
            _plans.update()
            .where(_plans.c.id == number)
            .values(
                cursor=plan["cursor"] + len(rows),
                wave=wave_no,
                wave_size=len(rows),
                wave_started_at=now,
                dead_at_wave_start=dead_before,
                note=None,
                waves={"schedule": schedule, "waves": waves},
                updated_at=now,
            )
        )
        await audit.append(
            conn,
            action="plan.wave_started",
            actor=actor,
            at=now,
            subject=f"P-{number}",
            queue=plan["queue"],
            incident=plan["incident"],
            reason=plan["reason"],
            details={
                "wave": wave_no,
                "changed": applied.changed,
                "skipped": [[s.id, s.why] for s in applied.skipped],
                "job_events": applied.job_events,
                "before": applied.before,
            },
        )
        await self._next_tick(conn, number, now + self._poll(plan), now)
        return [self._publish(number, [*(posts or []), ("started", wave_no)])]

    async def _halt_on_redead(
        self,
        conn: AsyncConnection,
        plan: dict[str, Any],
        current: dict[str, Any],
        redead: list[tuple[str, str | None]],
        now: datetime,
    ) -> list[FollowUp]:
        number = plan["id"]
        originals = {
            r["job_id"]: r["signature"]
            for r in (
                await conn.execute(
                    sa.select(_items.c.job_id, _items.c.signature).where(
                        _items.c.plan_id == number, _items.c.wave == current["number"]
                    )
                )
            )
            .mappings()
            .all()
        }
        same = [
            job
            for job, err in redead
            if display_signature(error_signature(err)) == originals.get(job)
        ]
        first_job, first_error = redead[0]
        new_sig = display_signature(error_signature(first_error))
        verdict = (
            f"the new error matches the original signature ({new_sig!r}): the fix did not hold"
            if len(same) == len(redead)
            else f"the new error differs from the original: now {new_sig!r}, was "
            f"{originals.get(first_job)!r}"
        )
        note = (
            f"HALTED: {len(redead)} job(s) of {current['label']} re-entered the dead-letter "
            f"state; {verdict}. Nothing more is redriven."
        )
        await self._mark(conn, number, [job for job, _ in redead], "redead")
        current.update(outcome="halted", finished_at=now.isoformat(), redead=len(redead))
        waves = plan["waves"]["waves"]
        waves[-1] = current
        await conn.execute(
            _plans.update()
            .where(_plans.c.id == number)
            .values(
                state=PlanState.HALTED.value,
                note=note,
                updated_at=now,
                waves={"schedule": plan["waves"]["schedule"], "waves": waves},
            )
        )
        await audit.append(
            conn,
            action="plan.halted",
            actor=SYSTEM,
            at=now,
            subject=f"P-{number}",
            queue=plan["queue"],
            incident=plan["incident"],
            reason=note,
            details={"redead": [[j, e] for j, e in redead], "same_signature": same},
        )
        return [self._publish(number, [("finished", current["number"]), ("note", note)])]

    # -- halt, resume, rollback ------------------------------------------------------------

    async def halt(self, *, number: int, actor: Actor, reason: str | None) -> PlanView:
        now = self.clock()
        async with self.engine.begin() as conn:
            plan = await self._lock(conn, number)
            if plan["state"] != PlanState.RUNNING.value:
                raise Conflict(f"P-{number} is {plan['state']}, not running; nothing to halt")
            note = f"halted by {actor.person or actor.account}" + (f": {reason}" if reason else "")
            await conn.execute(
                _plans.update()
                .where(_plans.c.id == number)
                .values(state=PlanState.HALTED.value, note=note, updated_at=now)
            )
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
        await conn.execute(
            _plans.update()
            .where(_plans.c.id == number)
            .values(state=PlanState.RUNNING.value, note=note, updated_at=now)
        )
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
                    sa.select(_items).where(
                        _items.c.plan_id == number, _items.c.state == "redriven"
                    )
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
        summary = (
            f"rolled back by {actor.person} (CR-{request}): {len(back)} unclaimed job(s) "
            f"returned to the dead letters; {len(rows) - len(back)} already claimed or "
            "finished were left alone"
        )
        await conn.execute(
            _plans.update()
            .where(_plans.c.id == number)
            .values(state=PlanState.ROLLED_BACK.value, note=summary, updated_at=now)
        )
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
                "left_alone": [r["job_id"] for r in rows if r["job_id"] not in set(back)],
            },
        )
        return back, [self._publish(number, [("note", summary)])]

    async def require(
        self, conn: AsyncConnection, *, number: int, states: tuple[str, ...]
    ) -> dict[str, Any]:
        row = (
            (await conn.execute(sa.select(_plans).where(_plans.c.id == number))).mappings().first()
        )
        if row is None:
            raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
        if row["state"] not in states:
            raise Conflict(f"P-{number} is {row['state']}; this needs a {' or '.join(states)} plan")
        return dict(row)

    # -- reading ---------------------------------------------------------------------------

    async def view(self, *, number: int) -> PlanView:
        async with self.engine.connect() as conn:
            return await self._view(conn, number)

    async def queue_of(self, *, number: int) -> str:
        async with self.engine.connect() as conn:
            queue = (
                await conn.execute(sa.select(_plans.c.queue).where(_plans.c.id == number))
            ).scalar_one_or_none()
        if queue is None:
            raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
        return str(queue)

    async def view_in(self, conn: AsyncConnection, *, number: int) -> PlanView:
        return await self._view(conn, number)

    async def _view(self, conn: AsyncConnection, number: int) -> PlanView:
        plan = (
            (await conn.execute(sa.select(_plans).where(_plans.c.id == number))).mappings().first()
        )
        if plan is None:
            raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
        grouped = await conn.execute(
            sa.select(_items.c.state, sa.func.count())
            .where(_items.c.plan_id == number)
            .group_by(_items.c.state)
        )
        counts: dict[str, int] = {str(k): int(n) for k, n in grouped.all()}
        waves = [
            Wave(
                number=w["number"],
                size=w["size"],
                started_at=datetime.fromisoformat(w["started_at"]),
                finished_at=(
                    datetime.fromisoformat(w["finished_at"]) if w["finished_at"] else None
                ),
                succeeded=w["succeeded"],
                redead=w["redead"],
                skipped=w["skipped"],
                outcome=w["outcome"],
            )
            for w in plan["waves"]["waves"]
        ]
        redriven = sum(
            int(n)
            for s, n in counts.items()
            if s in ("redriven", "succeeded", "redead", "rolled_back")
        )
        return PlanView(
            number=int(plan["id"]),
            queue=plan["queue"],
            state=PlanState(plan["state"]),
            request=int(plan["request_id"]),
            reason=plan["reason"],
            requester=plan["requester"],
            approvers=list(plan["approvers"]["people"]),
            total=int(plan["total"]),
            redriven=redriven,
            succeeded=int(counts.get("succeeded", 0)),
            redead=int(counts.get("redead", 0)),
            rolled_back=int(counts.get("rolled_back", 0)),
            schedule=list(plan["waves"]["schedule"]),
            waves=waves,
            note=plan["note"],
            updated_at=as_utc(plan["updated_at"]) or self.clock(),
            incident=plan["incident"],
            message_ref=plan["message_ref"],
        )

    # -- helpers -------------------------------------------------------------------------

    def _profile(self, plan: dict[str, Any]) -> QueueProfile:
        return self.estate.profile(plan["queue"])

    def _poll(self, plan: dict[str, Any]) -> timedelta:
        return timedelta(seconds=float(plan["poll_seconds"]))

    async def _dead(self, conn: AsyncConnection, profile: QueueProfile) -> int:
        counts = await profile.status_counts(conn)
        return sum(counts.get(s, 0) for s in profile.dead_letter_statuses)

    async def _lock(self, conn: AsyncConnection, number: int) -> dict[str, Any]:
        row = (
            (
                await conn.execute(
                    _plans.update()
                    .where(_plans.c.id == number)
                    .values(state=_plans.c.state)
                    .returning(*_plans.c)
                )
            )
            .mappings()
            .first()
        )
        if row is None:
            raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
        return dict(row)

    async def _next_tick(
        self, conn: AsyncConnection, number: int, due: datetime, now: datetime
    ) -> None:
        await scheduler.schedule(conn, kind=TICK, subject=str(number), due_at=due, created_at=now)

    async def _wave_items(self, conn: AsyncConnection, number: int, wave: int) -> list[ItemRef]:
        rows = (
            (
                await conn.execute(
                    sa.select(_items).where(
                        _items.c.plan_id == number,
                        _items.c.wave == wave,
                        _items.c.state == "redriven",
                    )
                )
            )
            .mappings()
            .all()
        )
        return [ItemRef(r["job_id"], r["message_id"], r["original"]) for r in rows]

    async def _mark(self, conn: AsyncConnection, number: int, jobs: list[str], state: str) -> None:
        for start in range(0, len(jobs), 5000):
            await conn.execute(
                _items.update()
                .where(
                    _items.c.plan_id == number,
                    _items.c.job_id.in_(jobs[start : start + 5000]),
                    _items.c.state == "redriven",
                )
                .values(state=state)
            )

    async def _save_waves(
        self,
        conn: AsyncConnection,
        plan: dict[str, Any],
        waves: list[dict[str, Any]],
        now: datetime,
    ) -> None:
        await conn.execute(
            _plans.update()
            .where(_plans.c.id == plan["id"])
            .values(waves={"schedule": plan["waves"]["schedule"], "waves": waves}, updated_at=now)
        )

    def _publish(self, number: int, posts: list[Any]) -> FollowUp:
        """After the commit: keep the plan's own message current and post each wave's news
        into its thread (the channel the plan was requested from)."""

        async def publish() -> None:
            if self.notifier is None:
                return
            view = await self.view(number=number)
            ref = MessageRef(**view.message_ref) if view.message_ref else None
            if ref is None:
                origin = await self._origin(number)
                posted = await self.notifier.post(
                    channel=origin, message=messages.plan_message(view)
                )
                if posted:
                    ref = posted[0]
                    async with self.engine.begin() as conn:
                        await conn.execute(
                            _plans.update()
                            .where(_plans.c.id == number)
                            .values(message_ref=asdict(ref))
                        )
            else:
                await self.notifier.update(ref=ref, message=messages.plan_message(view))
            for kind, detail in posts:
                if kind == "note":
                    message = messages.plan_note(view, str(detail))
                else:
                    wave = next(w for w in view.waves if w.number == detail)
                    message = (
                        messages.wave_started(view, wave)
                        if kind == "started"
                        else messages.wave_finished(view, wave)
                    )
                if ref is not None:
                    await self.notifier.post(channel=ref.channel, message=message, thread=ref)

        return publish

    async def _origin(self, number: int) -> ChannelRef:
        async with self.engine.connect() as conn:
            origin = (
                await conn.execute(sa.select(_plans.c.origin).where(_plans.c.id == number))
            ).scalar_one()
        platform = str(origin.get("platform") or "console")
        return ChannelRef(platform, str(origin.get("channel") or platform))
