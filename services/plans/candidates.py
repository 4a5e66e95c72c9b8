"""What a redrive would take: the frozen candidates, checked, and the wave schedule.
Steps in the caller's transaction.

A plan's freeze (``freeze_plan``) reads its candidates a page at a time and hands each
page's eligible rows to the caller, which keeps them as the request's items at once: a
plan over a million dead letters holds one page of rows in memory, never the million.
Named jobs (an immediate redrive, a few thousand at most) are frozen at once
(``candidates``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import RedriveConfig
from services.errors import ChecksFailed, PreconditionFailed
from services.estate.ops import Action, Ineligible, Selector, Target
from services.estate.profile import QueueProfile, plain
from services.plans import dead_again
from services.plans.model import Check, wave_sizes
from services.plans.preconditions import Evaluation, Screen, evaluate, queue_checks

PAGE = 5000  # candidates frozen and checked at a time: the rows in memory at once
LISTED = 1000  # excluded jobs a plan's request names one by one; the rest are summed up
SIGNATURES = 10_000  # distinct failures told apart in a plan's preview; the rest are lumped
OTHER_SIGNATURES = "(other failures, not told apart: more than 10,000 kinds)"

Keep = Callable[[list[Target]], Awaitable[None]]


async def candidates(
    conn: AsyncConnection,
    *,
    profile: QueueProfile,
    selector: Selector,
    reason: str,
    config: RedriveConfig,
    now: datetime,
    requester: str | None = None,
) -> tuple[list[Target], list[Ineligible], Evaluation]:
    """The jobs of an immediate redrive (named, or selected: every one in hand),
    frozen and checked."""
    if selector.from_plan is not None:
        ids = tuple(
            [
                job
                async for page in _dead_again(conn, profile=profile, selector=selector)
                for job in page
            ]
        )
    elif selector.bulk:
        ids = tuple(await profile.plan_ops.candidate_ids(conn, selector=selector))
    else:
        ids = tuple(dict.fromkeys(selector.ids))
    frozen = await profile.changes.freeze(conn, action=Action.REDRIVE, selector=Selector(ids=ids))
    evaluation = await evaluate(
        conn,
        profile=profile,
        ops=profile.plan_ops,
        targets=frozen.targets,
        reason=reason,
        config=config,
        now=now,
        staged=False,
        override_growth=selector.override_growth,
        requester=requester,
    )
    return evaluation.eligible, [*frozen.ineligible, *evaluation.excluded], evaluation


def refused_or_shown(
    kind: str, refusal: str | None, checks: Sequence[Check]
) -> list[tuple[str, str, str]]:
    """The checks as a request shows them; ``ChecksFailed`` with them where they refuse."""
    shown = [(c.name, c.verdict, c.detail) for c in checks]
    if refusal:
        raise ChecksFailed(refusal=f"{kind} {refusal}", checks=shown)
    return shown


@dataclass(frozen=True)
class PlanFreeze:
    """What a plan's freeze found, counted as its pages went by."""

    eligible: int
    excluded: list[Ineligible]  # named one by one up to LISTED, then summed up
    excluded_count: int  # every row excluded, named or not
    checks: list[Check]
    by_signature: list[tuple[str, int]]
    schedule: list[int]

    @property
    def refusal(self) -> str | None:
        return Evaluation(self.checks, [], []).refusal


async def freeze_plan(
    conn: AsyncConnection,
    *,
    profile: QueueProfile,
    selector: Selector,
    reason: str,
    config: RedriveConfig,
    now: datetime,
    keep: Keep,
    requester: str | None = None,
) -> PlanFreeze:
    """Freeze and check a plan's candidates a page at a time, handing each page's
    eligible rows (a job's rows together, in plan order) to ``keep``; up to ``--max``
    rows. When a check of the whole queue fails, every page is still checked (the
    refusal shows every check) but nothing is kept."""
    checks = await queue_checks(
        conn,
        profile=profile,
        reason=reason,
        config=config,
        now=now,
        staged=True,
        override_growth=selector.override_growth,
        requester=requester,
    )
    refused = Evaluation(checks, [], []).refusal is not None
    screen = Screen(profile.plan_ops, config, listed=LISTED)
    limit = selector.max_rows
    signatures: Counter[str] = Counter()
    eligible = beyond = 0
    async for ids in _pages(conn, profile=profile, selector=selector):
        if limit is not None and eligible >= limit:
            beyond += len(ids)  # past --max: counted, not frozen
            continue
        frozen = await profile.changes.freeze(
            conn, action=Action.REDRIVE, selector=Selector(ids=tuple(ids), ids_name_jobs=True)
        )
        screen.exclude(list(frozen.ineligible), "no longer dead when frozen")
        kept = _jobs_together(await screen.batch(conn, frozen.targets))
        if limit is not None and eligible + len(kept) > limit:
            beyond += eligible + len(kept) - limit
            kept = kept[: limit - eligible]
        for t in kept:
            if t.signature in signatures or len(signatures) < SIGNATURES:
                signatures[t.signature] += 1
            else:
                signatures[OTHER_SIGNATURES] += 1
        if kept and not refused:
            await keep(kept)
        eligible += len(kept)
    excluded = screen.summary()
    if beyond:
        excluded.append(
            Ineligible(f"{beyond} more", f"beyond --max {limit}; not part of this plan")
        )
    return PlanFreeze(
        eligible=eligible,
        excluded=excluded,
        excluded_count=screen.count + beyond,
        checks=[*checks, *screen.checks()],
        by_signature=signatures.most_common(),
        schedule=wave_schedule(config, eligible, selector.sample),
    )


async def _pages(
    conn: AsyncConnection, *, profile: QueueProfile, selector: Selector
) -> AsyncIterator[list[str]]:
    """The plan's candidate job ids, a page at a time, newest dead first."""
    if selector.from_plan is not None:
        async for page in _dead_again(conn, profile=profile, selector=selector):
            yield page
        return
    if selector.ids and not selector.bulk:
        ids = list(dict.fromkeys(selector.ids))
        for start in range(0, len(ids), PAGE):
            yield ids[start : start + PAGE]
        return
    query = await profile.plan_ops.candidate_query(conn, selector=selector)
    if conn.dialect.name != "postgresql":  # SQLite: the embedded default's own estates
        ids = [str(plain(r[0])) for r in (await conn.execute(query)).all()]
        for start in range(0, len(ids), PAGE):
            yield ids[start : start + PAGE]
        return
    # a server-side cursor: the database holds the ids, queuebot reads a page at a time
    # (on the same connection, between the statements each page makes)
    result = await conn.stream(query.execution_options(yield_per=PAGE))
    async for rows in result.partitions(PAGE):
        yield [str(plain(r[0])) for r in rows]


async def _dead_again(
    conn: AsyncConnection, *, profile: QueueProfile, selector: Selector
) -> AsyncIterator[list[str]]:
    """The jobs of the plan named by ``--from-plan`` that are dead now, in its order, a
    page at a time; with filters, those of them the filters select too (as /queue dlq
    would list them)."""
    assert selector.from_plan is not None
    number = selector.from_plan
    f = selector.dead_filter()
    filtered = any(
        v is not None for v in (f.error_like, f.tenant, f.reason, f.job_type, f.args_like)
    )
    # the filters' own selection, held as ids: bounded by what the filters match
    matching = (
        set(await profile.plan_ops.candidate_ids(conn, selector=selector)) if filtered else None
    )
    any_dead = False
    async for refs in dead_again.pages(conn, number=number, profile=profile, size=PAGE):
        jobs = await dead_again.dead_of(conn, profile=profile, items=refs)
        any_dead = any_dead or bool(jobs)
        yield jobs if matching is None else [job for job in jobs if job in matching]
    if not any_dead:
        raise PreconditionFailed(
            f"no job of P-{number} is dead again now: nothing to redrive. /queue plan "
            f"P-{number} shows how its jobs ended"
        )


def _jobs_together(targets: Sequence[Target]) -> list[Target]:
    """The targets in their order, each job's (its dead letters, where a job has several)
    next to one another, so that a wave can take a job whole."""
    by_job: dict[str, list[Target]] = {}
    for t in targets:
        by_job.setdefault(t.id, []).append(t)
    return [t for members in by_job.values() for t in members]


def wave_schedule(config: RedriveConfig, total: int, sample: int | None) -> list[int]:
    """The sample, then waves from ``first_wave`` doubling up to ``max_wave``."""
    return wave_sizes(
        total, sample=sample or config.sample, first=config.first_wave, cap=config.max_wave
    )
