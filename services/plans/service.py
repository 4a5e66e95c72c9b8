"""Plans as commands use them: each method is one use case that opens and commits its own
transaction (the steps it calls take that connection), and reports a committed change
as done even when the chat post after it fails."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from services.after_commit import AfterCommit
from services.audit import Actor
from services.db import reading, transaction
from services.db.on_commit import FollowUp, PostFailure
from services.ledger import Claim, complete_in, note_outcome
from services.outbox import Unshown
from services.plans import dead_again, store
from services.plans.control import PlanControl
from services.plans.model import PlanView
from services.plans.publish import unshown_news

log = logging.getLogger("queuebot.plans")


@dataclass(frozen=True)
class PlanOutcome:
    """A committed change to a plan, and the chat posts after it that failed (if any)."""

    view: PlanView
    post_failures: tuple[PostFailure, ...] = ()
    posts_pending: bool = False  # still going out when the answer was due: behind it


@dataclass(frozen=True)
class DeadAgain:
    """A plan's jobs that are dead again now (``dead_again``), and the queue they are in."""

    plan: int
    queue: str
    jobs: tuple[str, ...]
    redriven: int  # the jobs it redrove and did not return itself


class Plans:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        control: PlanControl,
        clock: Callable[[], datetime],
        after_commit: AfterCommit | None = None,
    ) -> None:
        self.engine = engine
        self.control = control
        self.clock = clock
        self.after_commit = after_commit or AfterCommit()

    async def view(self, *, number: int) -> PlanView:
        async with reading(self.engine) as conn:
            return await store.view(conn, number)

    async def unshown_news(self, *, number: int) -> Unshown:
        """The plan's posts nobody has been shown (``/queue plan`` says so)."""
        async with reading(self.engine) as conn:
            return await unshown_news(conn, number)

    async def queue_of(self, *, number: int) -> str:
        async with reading(self.engine) as conn:
            return await store.queue_of(conn, number)

    async def dead_again(self, *, number: int, queue: str | None) -> DeadAgain:
        """The plan's jobs that are dead again now; ``queue`` None: the plan's own queue."""
        estate = self.control.estate
        async with reading(self.engine) as conn:
            profile = estate.profile(queue or await store.queue_of(conn, number))
            redriven = await dead_again.items(conn, number=number, profile=profile)
        async with estate.connect() as conn:
            jobs = await dead_again.dead_of(conn, profile=profile, items=redriven)
        count = len({i.job_id for i in redriven})
        return DeadAgain(plan=number, queue=profile.queue, jobs=tuple(jobs), redriven=count)

    async def halt(
        self, *, number: int, actor: Actor, reason: str | None, delivery: Claim | None = None
    ) -> PlanOutcome:
        follow_ups: list[FollowUp] = []
        now = self.clock()
        async with transaction(self.engine, subject=f"P-{number}", follow_ups=follow_ups) as conn:
            if delivery is not None:  # done together with the halt, or not at all
                await complete_in(conn, delivery, now=now)
            view = await self.control.halt(conn, number=number, actor=actor, reason=reason, now=now)
            await note_outcome(conn, delivery, f"P-{number} halted")
        posts = await self.after_commit.run(follow_ups, what=f"halt of P-{number}")
        return PlanOutcome(view, posts.failures, posts.pending)

    async def close_if_nothing_unclaimed(
        self, *, number: int, actor: Actor, reason: str, delivery: Claim | None = None
    ) -> PlanOutcome | None:
        """Close the plan now when a rollback would return nothing (no approval needed
        for that); None, with nothing changed, when rows are still unclaimed."""
        follow_ups: list[FollowUp] = []
        now = self.clock()
        async with transaction(self.engine, subject=f"P-{number}", follow_ups=follow_ups) as conn:
            view = await self.control.close_if_nothing_unclaimed(
                conn, number=number, actor=actor, reason=reason, now=now
            )
            if view is None:
                return None
            if delivery is not None:  # done together with the close, or not at all
                await complete_in(conn, delivery, now=now)
            await note_outcome(conn, delivery, f"P-{number} closed")
        posts = await self.after_commit.run(follow_ups, what=f"close of P-{number}")
        return PlanOutcome(view, posts.failures, posts.pending)
