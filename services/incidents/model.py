"""What an incident looks like to the commands and messages (no database here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from services.audit import Actor


def number_text(number: int) -> str:
    return f"INC-{number}"


def who(actor: Actor) -> str:
    """How the timeline names a person: by name, else by platform account."""
    return actor.person or f"{actor.platform}:{actor.account}"


@dataclass(frozen=True)
class ObligationView:
    id: int
    audience: str
    channel_dependency: str
    within: timedelta
    due_at: datetime
    state: str  # pending | met | missed
    met_at: datetime | None
    met_by: str | None
    declared_at: datetime

    @property
    def latency(self) -> timedelta | None:
        return None if self.met_at is None else self.met_at - self.declared_at


@dataclass(frozen=True)
class StepView:
    kind: str  # restore | validation
    position: int
    name: str
    state: str  # pending | done
    check_id: str | None = None
    done_at: datetime | None = None
    done_by: str | None = None
    result: str | None = None


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    kind: str
    actor: str | None
    text: str


@dataclass(frozen=True)
class Note:
    """A line to write on an incident's timeline."""

    incident: int
    at: datetime
    kind: str
    text: str
    actor: str | None = None  # None: queuebot's own (the scheduler's)


@dataclass(frozen=True)
class IncidentView:
    number: int
    scenario: str
    runbook: str
    summary: str
    state: str  # open | resolved
    queue: str | None
    lead: str | None
    declared_at: datetime
    fault_at: datetime | None
    resolved_at: datetime | None
    # the restore step its runbook holds redrives on its queue until (None: it holds
    # none), and whether it still does (until that step is marked done)
    blocks_redrive_until: str | None = None
    blocks_redrive: bool = False
    obligations: tuple[ObligationView, ...] = ()
    # where the lead acts: the platform and its account (their mention there)
    lead_platform: str | None = None
    lead_account: str | None = None
    steps: tuple[StepView, ...] = ()
    timeline: tuple[TimelineEntry, ...] = ()
    drafts: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return number_text(self.number)

    def restore(self) -> list[StepView]:
        return [s for s in self.steps if s.kind == "restore"]

    def validation(self) -> list[StepView]:
        return [s for s in self.steps if s.kind == "validation"]

    def holding_step(self) -> tuple[int, StepView] | None:
        """The restore step redrives are held until, with its number as ``/incident
        status`` shows it (1, 2, ...); None where its runbook holds none."""
        return next(
            (
                (n + 1, s)
                for n, s in enumerate(self.restore())
                if s.name == self.blocks_redrive_until
            ),
            None,
        )

    def validated_at(self) -> datetime | None:
        """When the last validation item passed (measured by queuebot or confirmed by a
        person): when recovery is known to have happened. None while any item is not
        done, an overridden one included: then nobody measured it."""
        items = self.validation()
        if not items or any(s.state != "done" or s.done_at is None for s in items):
            return None
        return max(s.done_at for s in items if s.done_at is not None)


@dataclass(frozen=True)
class Lead:
    """Who leads an incident: their name as queuebot knows them ([people] name, or
    ``platform:account``) and the account they lead from."""

    name: str | None
    platform: str | None
    account: str | None

    @classmethod
    def of(cls, view: IncidentView) -> Lead:
        return cls(view.lead, view.lead_platform, view.lead_account)

    @property
    def known(self) -> bool:
        return self.name is not None or self.account is not None

    def same(self, other: Lead) -> bool:
        """The same person: the same name, or the same account on the same platform."""
        if self.name is not None and self.name == other.name:
            return True
        return self.account is not None and (self.platform, self.account) == (
            other.platform,
            other.account,
        )

    def shown(self) -> str:
        return self.name or (f"{self.platform}:{self.account}" if self.account else "nobody")

    def jsonable(self) -> dict[str, str | None]:
        return {"person": self.name, "platform": self.platform, "account": self.account}


@dataclass(frozen=True)
class Declared:
    incident: IncidentView
    linked: bool  # an open incident of the scenario and queue existed: this is it


@dataclass(frozen=True)
class Override:
    """A resolution without every validation item, on a change request another person
    approved (its audit event's ``override``)."""

    request: str
    requester: str
    approvers: list[str]
    reason: str
    unvalidated: list[str]
