"""Staged redrive plans (SPEC §7): the sample runs on approval, and every later wave is
started by a durable scheduler tick, only once the previous wave is all terminal, nothing
in it re-entered the dead-letter state, the dead-letter count is not growing and the
velocity cap allows. A re-dead-letter halts the plan; resuming needs a new approval.

Every step locks the plan row first (``UPDATE ... SET state = state``), so ticks from
several replicas, a halt and an approval serialise; the step, its audit event and the
next tick commit together.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services import audit
from services.audit import Actor
from services.changes.model import ChangeKind, Ineligible, Selector, Target
from services.changes.plan_ops import ItemRef, WaveStatus
from services.errors import Conflict
from services.estate.profile import QueueProfile, as_utc
from services.estate.signature import display_signature, error_signature
from services.plans.control import PlanControl
from services.plans.model import PlanState, wave_sizes
from services.plans.preconditions import Evaluation, evaluate
from services.plans.store import ITEMS, PLANS, SYSTEM, TICK, plan_ops_for
from services.scheduler import FollowUp

__all__ = ["TICK", "PlanEngine", "plan_ops_for"]


class PlanEngine(PlanControl):
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
                PLANS.insert()
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
                .returning(PLANS.c.id)
            )
        ).scalar_one()
        await conn.execute(
            ITEMS.insert(),
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
                return await self._halt_on_redead(conn, plan, current, status, now)
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
            await self._set_state(conn, number, PlanState.COMPLETED, "every wave succeeded", now)
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
        # The last wave took `changed` rows out of the dead letters; those that came back
        # (`redead`, when it halted and was resumed) are counted again, not as new growth.
        expected = plan["dead_at_wave_start"] - (
            current["changed"] - current.get("redead", 0) if current else 0
        )
        if current is not None and dead_now > expected:
            note = (
                f"waiting: {dead_now - expected:,} new dead letter(s) since "
                f"{current['label']} started; the next wave starts when the count stops "
                "growing"
            )
            if plan["note"] != note:
                await conn.execute(
                    PLANS.update().where(PLANS.c.id == number).values(note=note, updated_at=now)
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
                    sa.select(ITEMS)
                    .where(ITEMS.c.plan_id == number, ITEMS.c.seq >= plan["cursor"])
                    .order_by(ITEMS.c.seq)
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
                "o": originals.get(r["message_id"] or r["job_id"], r["original"]),
            }
            for r in rows
        ]
        if updates:
            await conn.execute(
                ITEMS.update()
                .where(ITEMS.c.plan_id == sa.bindparam("p"), ITEMS.c.seq == sa.bindparam("s"))
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
            PLANS.update()
            .where(PLANS.c.id == number)
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
        status: WaveStatus,
        now: datetime,
    ) -> list[FollowUp]:
        number = plan["id"]
        redead = status.redead
        originals = {
            r["job_id"]: r["signature"]
            for r in (
                await conn.execute(
                    sa.select(ITEMS.c.job_id, ITEMS.c.signature).where(
                        ITEMS.c.plan_id == number, ITEMS.c.wave == current["number"]
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
        await self._mark(conn, number, status.succeeded, "succeeded")  # the rest did finish
        current.update(
            outcome="halted",
            finished_at=now.isoformat(),
            redead=len(redead),
            succeeded=len(status.succeeded),
        )
        await self._save_waves(conn, plan, plan["waves"]["waves"], now)
        await self._set_state(conn, number, PlanState.HALTED, note, now)
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
