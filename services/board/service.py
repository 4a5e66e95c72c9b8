"""The board's read model: what one person has to do and watch, read at once.

One connection to queuebot's own tables, five statements built once: the pending
requests with who approved each, the active plans, their last halts, the open incidents
with their communications, and every queue's count written down an hour back. Beside it,
one to the queues: a statement counting every queue's dead letters now, through the
reads' gate (counts asked for again within moments are answered once). It only reads: a
request past its expiry is left out, not marked expired.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.board.model import (
    ActivePlan,
    Board,
    Deadline,
    Halt,
    OpenIncident,
    QueueDead,
    Request,
)
from services.changes import store as requests
from services.changes.kinds import Kinds
from services.changes.model import ChangeView
from services.changes.words import GENERIC
from services.db import reading
from services.db.tables import AuditEvent
from services.estate.profile import as_utc
from services.incidents import store as incidents
from services.incidents.model import IncidentView, Lead, ObligationView
from services.people import Person
from services.plans import store as plans
from services.plans.messages import where_now
from services.plans.model import PlanView
from services.reads import samples
from services.reads.service import DeadCounts, QueueReads

EVENTS = cast(sa.Table, AuditEvent.__table__)
HALTED = "plan.halted"  # the audit event of every halt, queuebot's or a person's
_HALTS = (
    sa.select(EVENTS.c.subject, EVENTS.c.occurred_at, EVENTS.c.actor_person, EVENTS.c.reason)
    .where(EVENTS.c.subject.in_(sa.bindparam("plans", expanding=True)), EVENTS.c.action == HALTED)
    .order_by(EVENTS.c.id)
)
TREND = timedelta(hours=1)  # dead letters now against this long before
# Counts are written down every [alerts] sample_seconds (a minute by default, an hour at
# most): the newest count at least an hour old stands for "an hour ago" only where it is
# at most this much older than that; an older one says nothing of the last hour, and the
# board says it has none rather than pass a longer span off as the hour.
TREND_SLACK = timedelta(minutes=15)


@dataclass(frozen=True)
class _Read:
    """What the board read of queuebot's own tables, in one connection."""

    pending: list[ChangeView]
    plans: list[PlanView]
    halts: dict[int, Halt]
    incidents: list[IncidentView]
    written: dict[str, tuple[datetime, int]]  # each queue's count an hour back, and when


class BoardReader:
    def __init__(
        self,
        engine: AsyncEngine,
        reads: QueueReads,
        kinds: Kinds,
        clock: Callable[[], datetime],
    ) -> None:
        self.engine = engine  # queuebot's own tables
        self.reads = reads  # the queues, through the reads' gate
        self.kinds = kinds  # what each kind of request says of itself
        self.clock = clock

    async def board(self, *, person: Person | None) -> Board:
        """The board of ``person`` (None: of anyone looking, for whom every pending
        request waits) as it stands now."""
        return (await self.read()).board(person)

    async def read(self) -> Snapshot:
        """Everything every board shows, read once: each person's board is then made of
        it without reading again (the Slack App Homes of everyone who looks, refreshed
        together)."""
        now = self.clock()
        queues = self.reads.queue_names
        read, dead = await asyncio.gather(
            self._own_tables(now, queues), self.reads.dead_letters(queues)
        )
        return Snapshot(
            at=now,
            pending=tuple(self._request(v) for v in read.pending),
            plans=tuple(_plan(p, read.halts.get(p.number)) for p in read.plans),
            incidents=tuple(_incident(i, now) for i in read.incidents),
            queues=tuple(_queue(q, dead, read.written.get(q)) for q in queues),
        )

    async def _own_tables(self, now: datetime, queues: Sequence[str]) -> _Read:
        async with reading(self.engine) as conn:
            pending = await requests.pending_views(conn, now=now)
            active = await plans.active_views(conn)
            return _Read(
                pending=pending,
                plans=active,
                halts=await last_halts(conn, [p.number for p in active]),
                incidents=await incidents.open_views(conn),
                written=await samples.dead_written(
                    conn, queues=queues, at=now - TREND, within=TREND_SLACK
                ),
            )

    def _request(self, v: ChangeView) -> _Pending:
        kind = self.kinds.find(v.kind)
        words = kind.words if kind is not None else GENERIC
        request = Request(
            number=v.number,
            headline=words.said(v).headline,
            requester=v.requester,
            approvals=len(v.approvals),
            needed=v.approvals_required,
            expires_at=v.expires_at,
            reason=v.reason,
        )
        return _Pending(request, frozenset(v.approvals))


@dataclass(frozen=True)
class _Pending:
    request: Request
    approvers: frozenset[str]  # who approved it so far


@dataclass(frozen=True)
class Snapshot:
    """What the boards show, as read at ``at``; ``board`` makes one person's of it."""

    at: datetime
    pending: tuple[_Pending, ...]
    plans: tuple[ActivePlan, ...]
    incidents: tuple[OpenIncident, ...]
    queues: tuple[QueueDead, ...]

    def board(self, person: Person | None) -> Board:
        name = None if person is None else person.name
        approver = person is None or person.has("approver")

        def waits(p: _Pending) -> bool:
            """For the person's approval: not theirs, not approved by them already."""
            r = p.request
            return name is None or (approver and r.requester != name and name not in p.approvers)

        return Board(
            at=self.at,
            person=name,
            approver=approver,
            waiting=tuple(p.request for p in self.pending if waits(p)),
            own=tuple(p.request for p in self.pending if p.request.requester == name),
            plans=self.plans,
            incidents=self.incidents,
            queues=self.queues,
        )


async def last_halts(conn: AsyncConnection, numbers: Sequence[int]) -> dict[int, Halt]:
    """Each plan's last halt as its audit event keeps it: when, by whom (None: queuebot
    itself) and why (queuebot's halt: its note; a person's: their reason, if they gave one)."""
    if not numbers:
        return {}
    halts: dict[int, Halt] = {}
    for subject, at, person, reason in await conn.execute(
        _HALTS, {"plans": [f"P-{n}" for n in numbers]}
    ):
        when = as_utc(at)
        assert when is not None
        halts[int(str(subject).removeprefix("P-"))] = Halt(when, person, reason)
    return halts


def _plan(p: PlanView, halt: Halt | None) -> ActivePlan:
    return ActivePlan(
        number=p.number,
        queue=p.queue,
        state=p.state,
        waves_done=sum(1 for w in p.waves if w.finished_at is not None),
        waves=max(len(p.schedule), len(p.waves)),
        redriven=p.redriven,
        total=p.total,
        succeeded=p.succeeded,
        redead=p.redead,
        now=where_now(p),
        halt=halt,
    )


def _incident(view: IncidentView, now: datetime) -> OpenIncident:
    return OpenIncident(
        number=view.number,
        summary=view.summary,
        queue=view.queue,
        lead=Lead.of(view).shown() if Lead.of(view).known else None,
        deadlines=tuple(_deadline(o, now) for o in view.obligations),
    )


def _deadline(o: ObligationView, now: datetime) -> Deadline:
    """Told in time (met), told after its deadline (missed, then met), missed (its
    deadline passed untold, whether or not the escalation has run yet), or still due."""
    if o.met_at is not None:
        return Deadline(o.audience, "told" if o.state == "met" else "told late", o.due_at, o.met_at)
    if o.state == "missed" or o.due_at <= now:
        return Deadline(o.audience, "missed", o.due_at)
    return Deadline(o.audience, "due", o.due_at)


def _queue(queue: str, dead: DeadCounts, then: tuple[datetime, int] | None) -> QueueDead:
    now = dead.counts.get(queue)
    if now is None:
        return QueueDead(queue, None, unread=dead.unread.get(queue, "not counted"))
    if then is None:
        return QueueDead(queue, now)
    return QueueDead(queue, now, before=then[1], before_at=then[0])
