"""The board as values: what one person has to do and watch now, gathered once
(``service.py``) and said in words (``messages.py``), the same for every surface that
shows it: the console's ``/queue board``, a Slack App Home, a Discord status message."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from services.plans.model import PlanState


@dataclass(frozen=True)
class Request:
    """A change request waiting for approval."""

    number: int
    headline: str  # what its kind says it does: "staged redrive of 14 dead letter(s) in ..."
    requester: str
    approvals: int  # so far
    needed: int
    expires_at: datetime
    reason: str

    @property
    def ref(self) -> str:
        return f"CR-{self.number}"


@dataclass(frozen=True)
class Halt:
    """A plan's last halt, as its audit event keeps it."""

    at: datetime
    by: str | None  # None: queuebot halted it itself
    cause: str | None  # queuebot's note, or the person's reason (None: they gave none)


@dataclass(frozen=True)
class ActivePlan:
    """A running or halted plan: its waves done of those scheduled, its jobs, where it is."""

    number: int
    queue: str
    state: PlanState
    waves_done: int  # the sample counts as a wave
    waves: int
    redriven: int
    total: int
    succeeded: int
    redead: int
    now: str  # where it is, in the plan's own words (``where_now``)
    halt: Halt | None  # the last halt, if it ever halted

    @property
    def ref(self) -> str:
        return f"P-{self.number}"


Told = Literal["told", "told late", "due", "missed"]


@dataclass(frozen=True)
class Deadline:
    """One audience's communication of an incident: told (in time or late), due, or
    missed (its deadline passed and nobody was told)."""

    audience: str
    state: Told
    due_at: datetime
    told_at: datetime | None = None


@dataclass(frozen=True)
class OpenIncident:
    number: int
    summary: str
    queue: str | None
    lead: str | None  # None: nobody leads it
    deadlines: tuple[Deadline, ...]

    @property
    def ref(self) -> str:
        return f"INC-{self.number}"


@dataclass(frozen=True)
class QueueDead:
    """A queue's dead letters now, and as written down about an hour before (None: no
    count was written then, or the queue could not be read now: ``unread`` says why)."""

    queue: str
    now: int | None
    before: int | None = None
    before_at: datetime | None = None
    unread: str | None = None


@dataclass(frozen=True)
class Board:
    """What one person (``person``; None: anyone looking) has to do and watch at ``at``.
    Each list is whole: the words cut them (``messages.py``)."""

    at: datetime
    person: str | None
    approver: bool  # the person holds the approver role now (anyone: True)
    waiting: tuple[Request, ...]  # for their approval: not theirs, not approved by them
    own: tuple[Request, ...]  # theirs, waiting for someone else's
    plans: tuple[ActivePlan, ...]
    incidents: tuple[OpenIncident, ...]
    queues: tuple[QueueDead, ...]
