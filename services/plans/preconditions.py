"""The preconditions of a redrive, each evaluated and shown: a reason, a dead-letter
count that is not growing, no open incident that blocks redrives (one whose runbook holds
them until a restore step, not yet marked done), the job's source object still there, an
error not classified permanent, and fewer than K earlier redrives.
Queue-wide checks refuse the whole request; per-job checks exclude the jobs that fail
them and say why."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import RedriveConfig
from services.db.tables import Incident, IncidentStep
from services.estate.ops import Ineligible, PlanOps, Target
from services.estate.profile import QueueProfile
from services.plans.model import Check
from services.reads.samples import Growth, dead_growth

_incidents = cast(sa.Table, Incident.__table__)
_steps = cast(sa.Table, IncidentStep.__table__)


@dataclass(frozen=True)
class Evaluation:
    checks: list[Check]
    eligible: list[Target]
    excluded: list[Ineligible]

    @property
    def refusal(self) -> str | None:
        failed = [c for c in self.checks if c.passed is False and c.overridden is None]
        if not failed:
            return None
        return "refused: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)


async def evaluate(
    conn: AsyncConnection,
    *,
    profile: QueueProfile,
    ops: PlanOps,
    targets: list[Target],
    reason: str,
    config: RedriveConfig,
    now: datetime,
    staged: bool,
    override_growth: bool = False,
    requester: str | None = None,
) -> Evaluation:
    """Every check of a redrive of ``targets``, all in hand (named jobs: a few thousand
    at most). A plan's freeze runs the same checks page by page (``Screen``)."""
    checks = await queue_checks(
        conn,
        profile=profile,
        reason=reason,
        config=config,
        now=now,
        staged=staged,
        override_growth=override_growth,
        requester=requester,
    )
    screen = Screen(ops, config, listed=None)
    eligible = await screen.batch(conn, targets)
    return Evaluation([*checks, *screen.checks()], eligible, screen.excluded)


async def queue_checks(
    conn: AsyncConnection,
    *,
    profile: QueueProfile,
    reason: str,
    config: RedriveConfig,
    now: datetime,
    staged: bool,
    override_growth: bool = False,
    requester: str | None = None,
) -> list[Check]:
    """The checks of the whole queue: a reason, the dead letters not growing, no open
    incident holding redrives."""
    checks: list[Check] = []
    reason_ok = len(reason.strip()) >= 3
    checks.append(
        Check(
            "reason given",
            reason_ok,
            f"{reason.strip()!r}" if reason_ok else 'say why: --reason "..."',
        )
    )

    window = timedelta(minutes=config.growth_window_minutes)
    growth = await dead_growth(conn, profile=profile, now=now, window=window)
    # A plan needs a measured, flat dead-letter count; named jobs refuse only a measured rise.
    growth_ok: bool | None = {"ok": True, "growing": False, "unknown": False if staged else None}[
        growth.verdict
    ]
    minutes = growth.minutes(now)  # the span actually judged, which a label must name
    checks.append(
        _growth_check(
            "dead letters not growing" + (f" ({minutes} min)" if minutes else ""),
            growth,
            growth_ok,
            window=window,
            override=override_growth,
            requester=requester,
            reason=reason,
        )
    )
    checks.append(await _incidents_holding(conn, profile.queue))
    return checks


@dataclass
class _Stage:
    """One per-job check, counted over every batch: the jobs it excluded, and the jobs
    that came through it (a check passes when it excluded none, or let some through)."""

    excluded: int = 0
    passed: int = 0


class Screen:
    """The per-job checks of a redrive (the source object still there, an error not
    classified permanent, fewer than K earlier redrives), run on one batch of frozen
    targets at a time: what it keeps of the batch comes back, and what it excluded is
    counted. ``listed`` caps the excluded jobs named one by one (None: every one); the
    rest are summed up by check, so a freeze of a million rows keeps a bounded list."""

    def __init__(self, ops: PlanOps, config: RedriveConfig, *, listed: int | None) -> None:
        self.ops = ops
        self.config = config
        self.listed = listed
        self.excluded: list[Ineligible] = []
        self.unlisted: Counter[str] = Counter()
        self.source, self.permanent, self.spent = _Stage(), _Stage(), _Stage()
        self.patterns = [re.compile(p, re.IGNORECASE) for p in config.permanent_errors]
        # judged once per distinct signature: ten thousand jobs share a few dozen of them
        self.verdicts: dict[str, str | None] = {}

    def exclude(self, found: list[Ineligible], check: str) -> None:
        """Count ``found`` among the excluded, naming each while the list has room."""
        room = len(found) if self.listed is None else max(0, self.listed - len(self.excluded))
        self.excluded.extend(found[:room])
        if len(found) > room:
            self.unlisted[check] += len(found) - room

    async def batch(self, conn: AsyncConnection, targets: list[Target]) -> list[Target]:
        remaining = list(targets)
        missing = await self.ops.source_missing(conn, targets=remaining)
        remaining = self._stage(remaining, missing, self.source, "without their source object")

        permanent: dict[str, str] = {}
        for t in remaining:
            if t.signature not in self.verdicts:
                hit = next((p for p in self.patterns if p.search(t.signature)), None)
                why = f"error classified permanent ({hit.pattern})" if hit else None
                self.verdicts[t.signature] = why
            if (why := self.verdicts[t.signature]) is not None:
                permanent[t.id] = why
        remaining = self._stage(remaining, permanent, self.permanent, "with a permanent error")

        counts = await self.ops.redrive_counts(conn, targets=remaining)
        limit = self.config.max_redrives_per_job
        spent = {
            job: f"already redriven {n} time(s); the limit is {limit}"
            for job, n in counts.items()
            if n >= limit
        }
        return self._stage(remaining, spent, self.spent, "at the redrive limit")

    def _stage(
        self, targets: list[Target], why: dict[str, str], stage: _Stage, check: str
    ) -> list[Target]:
        if not why:
            stage.passed += len(targets)
            return targets
        kept: list[Target] = []
        out: list[Ineligible] = []
        for t in targets:
            if t.id in why:
                out.append(Ineligible(t.id, why[t.id]))
            else:
                kept.append(t)
        stage.excluded += len(out)
        stage.passed += len(kept)
        self.exclude(out, check)
        return kept

    @property
    def count(self) -> int:
        """Every job excluded, named or not."""
        return len(self.excluded) + sum(self.unlisted.values())

    def summary(self) -> list[Ineligible]:
        """The excluded jobs named, then one line for those not named, by check."""
        if not self.unlisted:
            return list(self.excluded)
        total = sum(self.unlisted.values())
        by_check = ", ".join(f"{n:,} {check}" for check, n in self.unlisted.most_common())
        return [*self.excluded, Ineligible(f"{total:,} more", f"not listed: {by_check}")]

    def checks(self) -> list[Check]:
        source, permanent, spent = self.source, self.permanent, self.spent
        has_sources = self.ops.has_sources
        limit = self.config.max_redrives_per_job
        return [
            Check(
                "source object exists",
                None if not has_sources else (source.passed > 0 or not source.excluded),
                (
                    f"{source.excluded} job(s) without their source object excluded"
                    if source.excluded
                    else "every source object is present"
                )
                if has_sources
                else "this estate keeps no source objects",
            ),
            Check(
                "failure not classified permanent",
                permanent.passed > 0 or not permanent.excluded,
                f"{permanent.excluded} job(s) with a permanent error excluded"
                if permanent.excluded
                else "no permanent errors among them",
            ),
            Check(
                f"redriven fewer than {limit} times",
                spent.passed > 0 or not spent.excluded,
                f"{spent.excluded} job(s) at the limit excluded"
                if spent.excluded
                else "none at the limit",
            ),
        ]


def _growth_check(
    name: str,
    growth: Growth,
    passed: bool | None,
    *,
    window: timedelta,
    override: bool,
    requester: str | None,
    reason: str,
) -> Check:
    """The growth check as the request shows it: what was measured; when it fails, when
    it will pass and how to go ahead now, or, with ``--override-growth``, who overrode it
    and why."""
    measured = growth.describe()
    if passed is not False:
        unneeded = "; --override-growth was given and not needed" if override else ""
        return Check(name, passed, measured + unneeded)
    if override:
        by = f"overridden by {requester or 'the requester'}: {reason.strip()}"
        return Check(name, passed, f"{by}; measured: {measured}", overridden=by)
    wait = f"; {growth.when_clear(window)}" if growth.verdict == "growing" else ""
    return Check(
        name,
        passed,
        f"{measured}{wait}; if you know the outage is over, add --override-growth to go "
        "ahead (a second person approves it as any change)",
    )


async def _incidents_holding(conn: AsyncConnection, queue: str) -> Check:
    """The open incidents that hold redrives on ``queue`` (an incident naming no queue
    holds them on every queue), each with the restore step that lifts its hold."""
    held = sa.and_(
        _steps.c.incident_id == _incidents.c.id,
        _steps.c.kind == "restore",
        _steps.c.name == _incidents.c.blocks_redrive_until,
    )
    blocking = (
        await conn.execute(
            sa.select(
                _incidents.c.id,
                _incidents.c.scenario,
                _incidents.c.queue,
                _steps.c.name,
                _steps.c.position,
            )
            .select_from(_incidents.outerjoin(_steps, held))
            .where(
                _incidents.c.state == "open",
                _incidents.c.blocks_redrive.is_(True),
                sa.or_(_incidents.c.queue.is_(None), _incidents.c.queue == queue),
            )
            .order_by(_incidents.c.id)
        )
    ).all()
    return Check(
        "no open incident blocks redrives",
        not blocking,
        "; ".join(_holding(*row) for row in blocking) or "none open",
    )


def _holding(
    number: int, scenario: str, queue: str | None, step: str | None, at: int | None
) -> str:
    """How an incident holds redrives, and what lifts the hold."""
    name = f"INC-{number}"
    if step is None or at is None:  # no step to mark done: only resolving it lifts it
        return f"{name} ({scenario}) is open and blocks redrives until it is resolved"
    where = f"on {queue}" if queue else "on every queue"
    # restore steps come first, in the runbook's order: step N is position N - 1
    return (
        f"{name} ({scenario}) is restoring {step}: redrives {where} wait until its restore "
        f"step {at + 1} ({step}) is done; once it is restored, /incident step {at + 1} done "
        f"--incident {name}"
    )
