"""The gauges ``GET /metrics`` reads from queuebot's own database: change requests by state,
alert notifications set aside, redrive plans and their jobs, open incidents and their
communications, the outbox backlog and the scheduler's lag. They are the same on every
replica, and they survive restarts: nothing here is counted in the process.

Each statement is answered from an index or from a table of one row per plan or request
(``qb_plans``): the open incidents by their state index, the undone outbox items by their
partial index, the schedule by its due-time index, a plan's jobs by their primary key;
but the set-aside notifications, a scan of the alert inbox (which forgetting and
``db prune`` keep small).

Two values are totals over every plan there ever was: the jobs plans redrove and the times
a plan was halted. A plan that ended (completed, rolled back, closed) changes neither of
them any more, so the reader keeps the sum over the plans that had ended, and each reading
counts only the plans new since the last one and those active then or now (at most one
per queue). The first reading after a start counts every plan once.

The states are written here as the plans and incidents services store them (this layer
may not import those services; a test holds the two to the same words).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import (
    AlertInbox,
    AuditEvent,
    ChangeRequest,
    Incident,
    IncidentObligation,
    OutboxItem,
    Plan,
    PlanItem,
    ScheduledItem,
)
from services.estate.profile import as_utc
from services.outbox import chat_posts

PLAN_STATES = ("running", "halted", "completed", "rolled_back", "closed")
ACTIVE_PLAN_STATES = ("running", "halted")
PLAN_JOB_STATES = (
    "waiting",
    "redriven",
    "skipped",
    "succeeded",
    "redead",
    "rolled_back",
    "unknown",
)
# A plan's jobs that were redriven, whatever came of it.
REDRIVEN_JOB_STATES = ("redriven", "succeeded", "redead", "rolled_back", "unknown")
PLAN_HALTED = "plan.halted"  # the audit action of every halt, automatic or by a person
# An open incident's communications: told in time (met) or late or never (missed), and
# not told yet, with the deadline ahead (pending) or passed (overdue: the timer that marks
# it missed and escalates it has not run yet).
OBLIGATION_STATES = ("pending", "overdue", "met", "missed")
OPEN_INCIDENT = "open"

_requests = cast(sa.Table, ChangeRequest.__table__)
_inbox = cast(sa.Table, AlertInbox.__table__)
_plans = cast(sa.Table, Plan.__table__)
_items = cast(sa.Table, PlanItem.__table__)
_audit = cast(sa.Table, AuditEvent.__table__)
_incidents = cast(sa.Table, Incident.__table__)
_obligations = cast(sa.Table, IncidentObligation.__table__)
_outbox = cast(sa.Table, OutboxItem.__table__)
_schedule = cast(sa.Table, ScheduledItem.__table__)


@dataclass(frozen=True)
class ActivePlan:
    """A running or halted plan: its queue, its current wave (0 is the sample, -1 before
    the sample started), the waves of its schedule and its jobs per state."""

    queue: str
    halted: bool
    wave: int
    waves: int
    jobs: Mapping[str, int]


@dataclass(frozen=True)
class OwnState:
    """What one reading of queuebot's own database found."""

    change_requests: Mapping[str, int]
    set_aside: int
    plans: Mapping[str, int]  # every plan state, 0 where none
    active_plans: tuple[ActivePlan, ...]
    plan_jobs_redriven: int  # all plans ever
    plan_halts: int  # all plans ever
    incidents_open: Mapping[str, int]  # by whether they block redrives: "true", "false"
    obligations: Mapping[str, int]  # of the open incidents, every OBLIGATION_STATES word
    outbox_pending: int
    outbox_oldest_age: float  # seconds; 0 when nothing is pending
    scheduler_due: int
    scheduler_lag: float  # seconds the most overdue due item is late; 0 when none is due


@dataclass(frozen=True)
class _Settled:
    """The totals over the plans that had ended by the last reading, the highest plan
    number it saw and the plans that were active then."""

    seen_through: int = 0
    active: frozenset[int] = frozenset()
    redriven: int = 0
    halts: int = 0


@dataclass
class OwnStateReader:
    """Reads ``OwnState``; keeps the settled plan totals between readings. They move on
    only once a reading's plan counts have all answered (what they add is true whether
    the rest of that reading succeeds or not)."""

    request_states: tuple[str, ...] = ()
    # The scheduler kinds this queuebot runs (None: every kind). An item of another kind
    # (left by a configuration or version that ran it) is never taken here: it is not late
    # work, and counting it would keep the lag growing for good.
    scheduled_kinds: Callable[[], Collection[str]] | None = None
    _settled: _Settled = field(default_factory=_Settled)

    async def read(self, conn: AsyncConnection, *, now: datetime) -> OwnState:
        plans, redriven, halts = await self._plans(conn)
        outbox_pending, outbox_oldest = await _outbox_backlog(conn, now)
        kinds = None if self.scheduled_kinds is None else tuple(self.scheduled_kinds())
        due, lag = await _schedule_lag(conn, now, kinds)
        return OwnState(
            change_requests=await _change_requests(conn, self.request_states),
            set_aside=await _set_aside(conn),
            plans=await _plan_states(conn),
            active_plans=plans,
            plan_jobs_redriven=redriven,
            plan_halts=halts,
            incidents_open=await _incidents_open(conn),
            obligations=await _obligation_counts(conn, now),
            outbox_pending=outbox_pending,
            outbox_oldest_age=outbox_oldest,
            scheduler_due=due,
            scheduler_lag=lag,
        )

    async def _plans(self, conn: AsyncConnection) -> tuple[tuple[ActivePlan, ...], int, int]:
        """The active plans, and the all-time totals of jobs redriven and halts: what
        the plans that ended before hold, plus a count of the plans new since the last
        reading and of those active then or now."""
        # the highest number first: a plan started after it is left to the next reading,
        # and one that ends in between is counted as ended
        top = int((await conn.execute(sa.select(sa.func.max(_plans.c.id)))).scalar_one() or 0)
        rows = (
            await conn.execute(
                sa.select(
                    _plans.c.id, _plans.c.queue, _plans.c.state, _plans.c.wave, _plans.c.waves
                )
                .where(_plans.c.state.in_(ACTIVE_PLAN_STATES), _plans.c.id <= top)
                .order_by(_plans.c.id)
            )
        ).all()
        active = frozenset(int(r.id) for r in rows)
        settled = self._settled
        # A plan is created in one short transaction, so every plan numbered up to ``top``
        # is visible by the time a plan numbered above it has ended.
        counted = await _plan_totals(conn, settled.seen_through, top, settled.active | active)
        ended = [totals for plan, totals in counted.items() if plan not in active]
        live = [totals for plan, totals in counted.items() if plan in active]
        self._settled = _Settled(
            seen_through=max(top, settled.seen_through),
            active=active,
            redriven=settled.redriven + sum(r for r, _ in ended),
            halts=settled.halts + sum(h for _, h in ended),
        )
        jobs = await _active_jobs(conn, sorted(active))
        plans = tuple(
            ActivePlan(
                queue=str(r.queue),
                halted=r.state == "halted",
                wave=int(r.wave),
                waves=len(_schedule_of(r.waves)),
                jobs={s: jobs.get((int(r.id), s), 0) for s in PLAN_JOB_STATES},
            )
            for r in rows
        )
        return (
            plans,
            self._settled.redriven + sum(r for r, _ in live),
            self._settled.halts + sum(h for _, h in live),
        )


def _schedule_of(waves: Any) -> list[Any]:
    schedule = waves.get("schedule") if isinstance(waves, Mapping) else None
    return list(schedule) if isinstance(schedule, list) else []


async def _plan_totals(
    conn: AsyncConnection, after: int, through: int, also: frozenset[int]
) -> dict[int, tuple[int, int]]:
    """Jobs redriven and halts per plan, of the plans numbered ``after`` + 1 to
    ``through`` and of the plans ``also`` (each of these in the answer; a plan of the
    range with neither is left out: it adds nothing)."""
    wanted: list[int] = sorted(also)

    def among(column: sa.ColumnElement[int]) -> sa.ColumnElement[bool]:
        in_range = sa.and_(column > after, column <= through)
        return sa.or_(in_range, column.in_(wanted)) if wanted else in_range

    out = {p: (0, 0) for p in wanted}
    redriven = await conn.execute(
        sa.select(_items.c.plan_id, sa.func.count())
        .where(among(_items.c.plan_id), _items.c.state.in_(REDRIVEN_JOB_STATES))
        .group_by(_items.c.plan_id)
    )
    for plan, n in redriven.all():
        out[int(plan)] = (int(n), 0)
    # each halt is one audit event on the plan (subject P-N): looked up by the subject index
    ref = sa.literal("P-") + sa.cast(_plans.c.id, sa.String)
    halts = await conn.execute(
        sa.select(_plans.c.id, sa.func.count())
        .select_from(_plans.join(_audit, _audit.c.subject == ref))
        .where(among(_plans.c.id), _audit.c.action == PLAN_HALTED)
        .group_by(_plans.c.id)
    )
    for plan, n in halts.all():
        out[int(plan)] = (out.get(int(plan), (0, 0))[0], int(n))
    return out


async def _active_jobs(conn: AsyncConnection, plans: list[int]) -> dict[tuple[int, str], int]:
    if not plans:
        return {}
    rows = await conn.execute(
        sa.select(_items.c.plan_id, _items.c.state, sa.func.count())
        .where(_items.c.plan_id.in_(plans))
        .group_by(_items.c.plan_id, _items.c.state)
    )
    return {(int(p), str(s)): int(n) for p, s, n in rows.all()}


async def _plan_states(conn: AsyncConnection) -> dict[str, int]:
    state = _plans.c.state
    rows = (await conn.execute(sa.select(state, sa.func.count()).group_by(state))).all()
    counts = dict.fromkeys(PLAN_STATES, 0)
    counts.update({str(s): int(n) for s, n in rows})
    return counts


async def _change_requests(conn: AsyncConnection, states: tuple[str, ...]) -> dict[str, int]:
    state = _requests.c.state
    rows = (await conn.execute(sa.select(state, sa.func.count()).group_by(state))).all()
    counts = dict.fromkeys(states, 0)
    counts.update({str(s): int(n) for s, n in rows})
    return counts


async def _set_aside(conn: AsyncConnection) -> int:
    query = sa.select(sa.func.count()).where(_inbox.c.set_aside_at.is_not(None))
    return int((await conn.execute(query)).scalar_one())


async def _incidents_open(conn: AsyncConnection) -> dict[str, int]:
    blocks = _incidents.c.blocks_redrive
    rows = await conn.execute(
        sa.select(blocks, sa.func.count())
        .where(_incidents.c.state == OPEN_INCIDENT)
        .group_by(blocks)
    )
    counts = {"true": 0, "false": 0}
    for blocking, n in rows.all():
        counts["true" if blocking else "false"] += int(n)
    return counts


async def _obligation_counts(conn: AsyncConnection, now: datetime) -> dict[str, int]:
    late = sa.func.sum(sa.case((_obligations.c.due_at <= now, 1), else_=0))
    rows = await conn.execute(
        sa.select(_obligations.c.state, sa.func.count(), late)
        .select_from(_incidents.join(_obligations, _obligations.c.incident_id == _incidents.c.id))
        .where(_incidents.c.state == OPEN_INCIDENT)
        .group_by(_obligations.c.state)
    )
    counts = dict.fromkeys(OBLIGATION_STATES, 0)
    for state, n, overdue in rows.all():
        if state == "pending":
            counts["overdue"] += int(overdue or 0)
            counts["pending"] += int(n) - int(overdue or 0)
        else:
            counts[str(state)] = counts.get(str(state), 0) + int(n)
    return counts


async def _outbox_backlog(conn: AsyncConnection, now: datetime) -> tuple[int, float]:
    pending, oldest = (
        await conn.execute(
            sa.select(sa.func.count(), sa.func.min(_outbox.c.created_at)).where(
                _outbox.c.done_at.is_(None), chat_posts()
            )
        )
    ).one()
    return int(pending), _age(oldest, now)


async def _schedule_lag(
    conn: AsyncConnection, now: datetime, kinds: tuple[str, ...] | None
) -> tuple[int, float]:
    """The due items of ``kinds`` (every kind: None), and how late the most overdue is."""
    handled = [_schedule.c.kind.in_(kinds)] if kinds is not None else []
    due, oldest = (
        await conn.execute(
            sa.select(sa.func.count(), sa.func.min(_schedule.c.due_at)).where(
                _schedule.c.due_at <= now, *handled
            )
        )
    ).one()
    return int(due), _age(oldest, now)


def _age(at: datetime | None, now: datetime) -> float:
    """Seconds from ``at`` to ``now``; 0 for none."""
    when = as_utc(at)
    return 0.0 if when is None else max(0.0, (now - when).total_seconds())
