"""What handlers depend on, as interfaces, so unit tests can pass fakes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from services.access import Standings
from services.audit import Actor
from services.changes.eligible import ApproverStanding
from services.changes.model import ChangeView, Decision
from services.config import AccessConfig, Role
from services.estate.args_like import ArgsFound
from services.estate.model import DeadFilter, JobDetail, JobList, Triage
from services.estate.ops import Selector
from services.housekeeping.report import RunReport
from services.incidents.model import Declared, IncidentView, Lead
from services.ledger import Claim
from services.metrics import Outcome
from services.outbox import Unshown
from services.people import Directory
from services.plans.model import PlanView
from services.plans.service import DeadAgain, PlanOutcome
from services.runbooks import Runbook


class QueueReader(Protocol):
    """The read side of the queue estate (``services.reads.service.QueueReads``)."""

    @property
    def queue_names(self) -> list[str]: ...

    def forget_recent(self) -> None: ...

    async def triage(
        self,
        *,
        queue: str | None,
        since: timedelta | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage: ...

    async def show_job(self, *, queue: str | None, job_id: str) -> JobDetail: ...

    async def find_by_args(self, *, queue: str | None, text: str) -> ArgsFound: ...

    async def list_dead(self, *, queue: str | None, filters: DeadFilter) -> JobList: ...

    async def list_stuck(self, *, queue: str | None, limit: int) -> JobList: ...


class ChangeService(Protocol):
    """Two-person-approved changes (``services.changes.requests.ChangeRequests``)."""

    async def request(
        self,
        *,
        kind: str,
        queue: str | None,
        selector: Selector,
        reason: str,
        actor: Actor,
        incident: str | None = None,
        evidence: str | None = None,
        origin: dict[str, Any] | None = None,
        delivery: Claim | None = None,
    ) -> ChangeView: ...

    async def approve(
        self,
        *,
        number: int,
        actor: Actor,
        delivery: Claim | None = None,
        standing: ApproverStanding = ...,
    ) -> Decision: ...

    async def reject(
        self,
        *,
        number: int,
        actor: Actor,
        reason: str | None,
        may_reject_others: bool,
        delivery: Claim | None = None,
    ) -> ChangeView: ...

    async def pending(self, *, queue: str | None = None) -> list[ChangeView]: ...


class PlanService(Protocol):
    """Staged redrive plans (``services.plans.service.Plans``)."""

    async def view(self, *, number: int) -> PlanView: ...

    async def dead_again(self, *, number: int, queue: str | None) -> DeadAgain: ...

    async def unshown_news(self, *, number: int) -> Unshown: ...

    async def halt(
        self, *, number: int, actor: Actor, reason: str | None, delivery: Claim | None = None
    ) -> PlanOutcome: ...

    async def close_if_nothing_unclaimed(
        self, *, number: int, actor: Actor, reason: str, delivery: Claim | None = None
    ) -> PlanOutcome | None: ...


class CommandMetrics(Protocol):
    """Where each command's outcome is counted (``services.metrics.Metrics``)."""

    def command(self, name: str, outcome: Outcome) -> None: ...


class RunbookShelf(Protocol):
    """The runbooks this process knows (``services.runbooks.RunbookLibrary``)."""

    def all(self) -> Sequence[Runbook]: ...

    def get(self, scenario_id: str) -> Runbook: ...


class IncidentService(Protocol):
    """Incidents (``services.incidents.service.Incidents``)."""

    async def declare(
        self,
        *,
        scenario: str,
        summary: str,
        actor: Actor,
        queue: str | None = None,
        origin: Mapping[str, Any] | None = None,
        alert_group: int | None = None,
        basis: Sequence[Mapping[str, Any]] = (),
    ) -> Declared: ...

    async def alert_context(self, group: int) -> tuple[str, str, str | None]: ...

    async def notify(
        self, *, number: int, audience: str, text: str | None, actor: Actor
    ) -> IncidentView: ...

    async def step_done(
        self, *, number: int, step: str, actor: Actor, result: str | None = None
    ) -> IncidentView: ...

    async def validate(
        self, *, number: int, actor: Actor, default_queue: str | None
    ) -> IncidentView: ...

    async def resolve(self, *, number: int, actor: Actor) -> IncidentView: ...

    async def hand_over(
        self,
        *,
        number: int,
        to: Lead,
        expected: Lead,
        actor: Actor,
        basis: Sequence[Mapping[str, Any]] = (),
    ) -> IncidentView: ...

    async def export(self, number: int) -> str: ...

    async def newest(
        self, *, platform: str, channel: str | None
    ) -> tuple[IncidentView, bool] | None: ...

    async def view(self, number: int) -> IncidentView: ...

    async def open_incidents(self) -> list[IncidentView]: ...


class HousekeepingService(Protocol):
    """One housekeeping run (``services.housekeeping.run.Housekeeper``)."""

    async def run(
        self, *, actor: Actor, dry_run: bool = False, only: Sequence[str] = ...
    ) -> RunReport: ...


@dataclass(frozen=True)
class Deps:
    reads: QueueReader
    changes: ChangeService
    plans: PlanService
    directory: Directory
    access: AccessConfig
    config_file: str | None = None  # the file [people] was read from (None: no file)
    metrics: CommandMetrics | None = None  # None: commands are not counted (unit tests)
    incidents: IncidentService | None = None
    runbooks: RunbookShelf | None = None  # None: this process loaded no runbooks
    roles: Mapping[str, Role] = field(default_factory=dict)  # [roles]: authority -> role
    housekeeping: HousekeepingService | None = None  # None: changes are off in this process
    # roles, teams and rotas from groups (services/access); None: [people] alone decides
    standings: Standings | None = None
