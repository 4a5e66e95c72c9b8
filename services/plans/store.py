"""Plan storage and publishing: the plan row and its items, views, locks, the next tick,
and the posts that keep a plan's message current. ``PlanEngine`` builds on it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import scheduler
from services.audit import Actor
from services.changes.message_job_plans import MessageJobPlanOps
from services.changes.ops import ChangeOps
from services.changes.plan_ops import ItemRef, PlanOps
from services.changes.worker_queue import WorkerQueuePlanOps
from services.config import RedriveConfig
from services.errors import Conflict, NotFound
from services.estate.estate import Estate
from services.estate.message_job import MessageJobProfile
from services.estate.profile import QueueProfile, as_utc
from services.ledger import DeliveryLedger
from services.models import Plan, PlanItem
from services.notify import Notifier
from services.plans.model import ACTIVE, PlanState, PlanView, Wave
from services.plans.publish import PlanPublisher, Post
from services.scheduler import FollowUp

TICK = "plan.tick"
PLANS = cast(sa.Table, Plan.__table__)
ITEMS = cast(sa.Table, PlanItem.__table__)
SYSTEM = Actor.system("plan")


def plan_ops_for(profile: QueueProfile) -> PlanOps:
    if isinstance(profile, MessageJobProfile):
        return MessageJobPlanOps(profile)
    from services.estate.worker_queue import WorkerQueueProfile

    assert isinstance(profile, WorkerQueueProfile)
    return WorkerQueuePlanOps(profile)


class PlanStore:
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

    async def active_plan(self, conn: AsyncConnection, queue: str) -> int | None:
        found = await conn.execute(
            sa.select(PLANS.c.id).where(PLANS.c.queue == queue, PLANS.c.state.in_(ACTIVE))
        )
        row = found.first()
        return int(row[0]) if row else None

    async def require(
        self, conn: AsyncConnection, *, number: int, states: tuple[str, ...]
    ) -> dict[str, Any]:
        row = (await conn.execute(sa.select(PLANS).where(PLANS.c.id == number))).mappings().first()
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
                await conn.execute(sa.select(PLANS.c.queue).where(PLANS.c.id == number))
            ).scalar_one_or_none()
        if queue is None:
            raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
        return str(queue)

    async def view_in(self, conn: AsyncConnection, *, number: int) -> PlanView:
        return await self._view(conn, number)

    async def _view(self, conn: AsyncConnection, number: int) -> PlanView:
        plan = (await conn.execute(sa.select(PLANS).where(PLANS.c.id == number))).mappings().first()
        if plan is None:
            raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
        grouped = await conn.execute(
            sa.select(ITEMS.c.state, sa.func.count())
            .where(ITEMS.c.plan_id == number)
            .group_by(ITEMS.c.state)
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
        return profile.dead_count(await profile.status_counts(conn))

    async def _lock(self, conn: AsyncConnection, number: int) -> dict[str, Any]:
        row = (
            (
                await conn.execute(
                    PLANS.update()
                    .where(PLANS.c.id == number)
                    .values(state=PLANS.c.state)
                    .returning(*PLANS.c)
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
                    sa.select(ITEMS).where(
                        ITEMS.c.plan_id == number,
                        ITEMS.c.wave == wave,
                        ITEMS.c.state == "redriven",
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
                ITEMS.update()
                .where(
                    ITEMS.c.plan_id == number,
                    ITEMS.c.job_id.in_(jobs[start : start + 5000]),
                    ITEMS.c.state == "redriven",
                )
                .values(state=state)
            )

    async def _set_state(
        self, conn: AsyncConnection, number: int, state: PlanState, note: str, now: datetime
    ) -> None:
        await conn.execute(
            PLANS.update()
            .where(PLANS.c.id == number)
            .values(state=state.value, note=note, updated_at=now)
        )

    async def _save_waves(
        self,
        conn: AsyncConnection,
        plan: dict[str, Any],
        waves: list[dict[str, Any]],
        now: datetime,
    ) -> None:
        await conn.execute(
            PLANS.update()
            .where(PLANS.c.id == plan["id"])
            .values(waves={"schedule": plan["waves"]["schedule"], "waves": waves}, updated_at=now)
        )

    def _publish(self, number: int, posts: list[Post]) -> FollowUp:
        """After the commit: keep the plan's own message current and post each wave's news
        into its thread (the channel the plan was requested from)."""

        async def publish() -> None:
            if self.notifier is None:
                return
            await PlanPublisher(
                engine=self.engine,
                notifier=self.notifier,
                ledger=DeliveryLedger(engine=self.engine, clock=self.clock),
                view=lambda n: self.view(number=n),
            ).publish(number, posts)

        return publish
