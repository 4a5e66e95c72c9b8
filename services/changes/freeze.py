"""What a change request will change, found and checked before anyone approves it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes.model import ChangeKind, IncidentOverrides, incident_number
from services.config import RedriveConfig
from services.errors import ChecksFailed, NotFound, PreconditionFailed
from services.estate.ops import Ineligible, Selector, Target
from services.estate.profile import QueueProfile
from services.plans import store as plan_store
from services.plans.candidates import Keep, PlanFreeze, candidates, freeze_plan
from services.plans.model import ACTIVE, Check, ItemState, PlanState


@dataclass(frozen=True)
class Frozen:
    targets: list[Target]
    ineligible: list[Ineligible]
    checks: list[tuple[str, str, str]] = field(default_factory=list)
    schedule: list[int] = field(default_factory=list)
    affected: int | None = None  # rows concerned where there are no targets (a plan's)


async def freeze(
    conn: AsyncConnection,
    *,
    redrive: RedriveConfig,
    now: datetime,
    kind: ChangeKind,
    profile: QueueProfile,
    selector: Selector,
    reason: str,
    incident: str | None = None,
    incidents: IncidentOverrides | None = None,
    requester: str | None = None,
) -> Frozen:
    if kind is ChangeKind.RESOLVE:
        # no rows: what is frozen is the list of validation items the override skips
        if incidents is None:
            raise PreconditionFailed("this queuebot process runs no incidents")
        skipped = await incidents.unvalidated(conn, incident_number(incident))
        return Frozen([], [], checks=skipped, affected=0)
    action = kind.action
    if action is not None and kind is not ChangeKind.REDRIVE:  # requeue, cancel
        found = await profile.changes.freeze(conn, action=action, selector=selector)
        return Frozen(found.targets, found.ineligible)
    if kind in (ChangeKind.RESUME, ChangeKind.ROLLBACK):
        return await _plan_change(conn, kind=kind, profile=profile, selector=selector)
    if kind is ChangeKind.PLAN:
        raise ValueError("a plan is frozen a page at a time: freeze_plan_items")
    targets, excluded, evaluation = await candidates(
        conn,
        profile=profile,
        selector=selector,
        reason=reason,
        config=redrive,
        now=now,
        requester=requester,
    )
    checks = _refused_or_shown(kind, evaluation.refusal, evaluation.checks)
    return Frozen(targets, excluded, checks=checks)


async def freeze_plan_items(
    conn: AsyncConnection,
    *,
    redrive: RedriveConfig,
    now: datetime,
    profile: QueueProfile,
    selector: Selector,
    reason: str,
    keep: Keep,
    requester: str | None = None,
) -> PlanFreeze:
    """A staged redrive's candidates, frozen and checked a page at a time, each page's
    eligible rows handed to ``keep`` (see ``freeze_plan``); refused when a check of the
    whole queue fails."""
    await plan_store.ensure_no_active_plan(conn, profile.queue)
    found = await freeze_plan(
        conn,
        profile=profile,
        selector=selector,
        reason=reason,
        config=redrive,
        now=now,
        keep=keep,
        requester=requester,
    )
    _refused_or_shown(ChangeKind.PLAN, found.refusal, found.checks)
    return found


def _refused_or_shown(
    kind: ChangeKind, refusal: str | None, checks: Sequence[Check]
) -> list[tuple[str, str, str]]:
    """The checks as a request shows them; ``ChecksFailed`` with them where they refuse."""
    shown = [(c.name, c.verdict, c.detail) for c in checks]
    if refusal:
        raise ChecksFailed(refusal=f"{kind.value} {refusal}", checks=shown)
    return shown


async def _plan_change(
    conn: AsyncConnection, *, kind: ChangeKind, profile: QueueProfile, selector: Selector
) -> Frozen:
    """Resume or roll back: no rows are frozen; the plan says how many are concerned."""
    if selector.plan is None:
        raise ValueError(f"a {kind.value} request names its plan")
    resume = kind is ChangeKind.RESUME
    plan = await plan_store.require(
        conn,
        number=selector.plan,
        states=(PlanState.HALTED,) if resume else ACTIVE,
        action="resume" if resume else "roll back",
    )
    if plan.queue != profile.queue:
        raise NotFound(f"P-{selector.plan} belongs to queue {plan.queue}; add --queue {plan.queue}")
    if resume:
        # What it changes before anyone can halt it again is its first wave: the one the
        # plan's schedule gives next (past the schedule, the plan's largest), at most
        # what is left. The quorum judges it by that, as a plan by its sample.
        view = await plan_store.view(conn, selector.plan)
        left = view.total - view.redriven
        following = len(view.waves)
        size = view.schedule[following] if following < len(view.schedule) else plan.max_wave
        return Frozen([], [], schedule=[min(size, left)] if left else [], affected=left)
    # a rollback: the rows it would return now, each checked in the queue, not the plan's
    # redriven rows whose outcome is not counted yet
    out = await plan_store.items_in(conn, selector.plan, state=ItemState.REDRIVEN)
    unclaimed = await profile.plan_ops.unclaimed(conn, items=plan_store.refs(out))
    return Frozen([], [], affected=len(unclaimed))


def nothing_to_do(
    kind: ChangeKind, selector: Selector, ineligible: list[Ineligible], total: int | None = None
) -> str:
    """Why a request changes nothing; ``total``: how many rows were ineligible, where
    ``ineligible`` names only some of them."""
    if not ineligible:
        return f"nothing to {kind.value}: no rows match {selector.describe()}"
    named = [i for i in ineligible if not i.id.endswith(" more")]
    total = len(named) if total is None else total
    listed = "; ".join(f"{i.id}: {i.why}" for i in named[:10])
    more = f" (and {total - 10:,} more)" if total > 10 else ""
    return f"nothing to {kind.value}: every row named is ineligible ({listed}{more})"
