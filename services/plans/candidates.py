"""What a redrive would take: the frozen candidates, checked, and the wave schedule.
Read-only steps in the caller's transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import RedriveConfig
from services.errors import PreconditionFailed
from services.estate.ops import Action, Ineligible, Selector, Target
from services.estate.profile import QueueProfile
from services.plans import dead_again
from services.plans.model import wave_sizes
from services.plans.preconditions import Evaluation, evaluate


async def candidates(
    conn: AsyncConnection,
    *,
    profile: QueueProfile,
    selector: Selector,
    reason: str,
    staged: bool,
    limit: int | None,
    config: RedriveConfig,
    now: datetime,
    requester: str | None = None,
) -> tuple[list[Target], list[Ineligible], Evaluation]:
    """The frozen candidates of a redrive, checked; named ids or a bulk selector."""
    ops = profile.plan_ops
    if selector.from_plan is not None:
        ids = tuple(await _dead_again(conn, profile=profile, selector=selector))
    elif selector.bulk or (staged and selector.failure_reason is not None):
        ids = tuple(await ops.candidate_ids(conn, selector=selector))
    else:
        ids = tuple(dict.fromkeys(selector.ids))
    frozen = await profile.changes.freeze(conn, action=Action.REDRIVE, selector=Selector(ids=ids))
    evaluation = await evaluate(
        conn,
        profile=profile,
        ops=ops,
        targets=frozen.targets,
        reason=reason,
        config=config,
        now=now,
        staged=staged,
        override_growth=selector.override_growth,
        requester=requester,
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


async def _dead_again(
    conn: AsyncConnection, *, profile: QueueProfile, selector: Selector
) -> list[str]:
    """The jobs of the plan named by ``--from-plan`` that are dead now, in its order; with
    filters, those of them the filters select too (as /queue dlq would list them)."""
    assert selector.from_plan is not None
    number = selector.from_plan
    again = await dead_again.jobs(conn, number=number, profile=profile)
    if not again:
        raise PreconditionFailed(
            f"no job of P-{number} is dead again now: nothing to redrive. /queue plan "
            f"P-{number} shows how its jobs ended"
        )
    f = selector.dead_filter()
    if all(v is None for v in (f.error_like, f.tenant, f.reason, f.job_type, f.args_like)):
        return again
    matching = set(await profile.plan_ops.candidate_ids(conn, selector=selector))
    return [job for job in again if job in matching]


def wave_schedule(config: RedriveConfig, total: int, sample: int | None) -> list[int]:
    """The sample, then waves from ``first_wave`` doubling up to ``max_wave``."""
    return wave_sizes(
        total, sample=sample or config.sample, first=config.first_wave, cap=config.max_wave
    )
