"""Commands as typed data. Parsing (free text or Discord options) produces one of these
models; the router sends it to its handler by type. How each is spelled is in
``commands/catalog/`` (one module per command family)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from services.estate import args_like

MAX_LIMIT = 200


def _args_text(text: str) -> str:
    """``--args-like``'s text, refused with the reason where it is too short or too long."""
    why = args_like.problem(text)
    if why is not None:
        raise ValueError(why)
    return text.strip()


# --args-like TEXT: a job's arguments hold TEXT (dlq and redrive filter by it, show finds by it)
ArgsLike = Annotated[str | None, AfterValidator(lambda v: None if v is None else _args_text(v))]


class Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class QueueCommand(Command):
    queue: str | None = None


class Help(Command):
    topic: str | None = None
    group: str = "queue"  # the command group it was asked in: /queue help, /incident help


class ReadCommand(QueueCommand):
    """A read-only command: its answer goes only to whoever asked, unless --share."""

    share: bool = False


class Triage(ReadCommand):
    since: timedelta | None = None
    job_type: str | None = None
    exact: bool = False


class Show(ReadCommand):
    job_id: str | None = None
    args_like: ArgsLike = None  # find the job by its arguments instead of its id

    @model_validator(mode="after")
    def _one_lookup(self) -> Show:
        if (self.job_id is None) == (self.args_like is None):
            raise ValueError(
                "name the job by its ID, or find it by its arguments with --args-like TEXT; "
                "not both"
                if self.job_id is not None
                else "/queue show needs ID, or --args-like TEXT to find the job by its arguments"
            )
        return self


class Dlq(ReadCommand):
    error_like: str | None = Field(default=None, min_length=1, max_length=500)
    tenant: str | None = None
    reason: str | None = None
    job_type: str | None = None
    limit: int = Field(default=20, ge=1, le=MAX_LIMIT)
    args_like: ArgsLike = None
    from_plan: int | None = Field(default=None, ge=1)  # that plan's jobs dead again


class Stuck(ReadCommand):
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)


# -- changes (two-person approval) -----------------------------------------------------

_INCIDENT = r"^INC-[0-9]{1,9}$"


class ChangeCommand(QueueCommand):
    reason: str = Field(min_length=3, max_length=500)


class Requeue(ChangeCommand):
    ids: list[str] = Field(min_length=1, max_length=10_000)


class Cancel(ChangeCommand):
    ids: list[str] = Field(default_factory=list, max_length=10_000)
    duplicates: bool = False
    failure_reason: str | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> Cancel:
        chosen = sum((bool(self.ids), self.duplicates, self.failure_reason is not None))
        if chosen != 1:
            raise ValueError(
                "name the rows to cancel in exactly one way: IDs, --duplicates, "
                "or --failure-reason R"
            )
        return self


class Redrive(ChangeCommand):
    ids: list[str] = Field(default_factory=list, max_length=10_000)
    incident: str | None = Field(default=None, pattern=_INCIDENT)
    evidence: str | None = Field(default=None, pattern=r"^https?://\S+$", max_length=500)
    error_like: str | None = Field(default=None, min_length=1, max_length=500)
    tenant: str | None = None
    failure_reason: str | None = None
    job_type: str | None = None
    all: bool = False
    sample: int | None = Field(default=None, ge=1, le=5)
    max: int | None = Field(default=None, ge=1, le=10_000_000)
    args_like: ArgsLike = None
    from_plan: int | None = Field(default=None, ge=1)  # that plan's jobs dead again
    override_growth: bool = False  # go ahead although dead letters are growing

    @property
    def filters(self) -> tuple[str | None, ...]:
        """The dead-letter filters, given or not: they combine into a plan's selection."""
        return (self.error_like, self.tenant, self.failure_reason, self.job_type, self.args_like)

    @property
    def staged(self) -> bool:
        return self.all or any(v is not None for v in self.filters) or self.from_plan is not None

    @model_validator(mode="after")
    def _one_selection(self) -> Redrive:
        if bool(self.ids) == self.staged:
            raise ValueError(
                "name the jobs (IDs) or select dead letters with --error-like, "
                "--tenant, --failure-reason, --job-type, --args-like, --from-plan or --all; "
                "not both"
            )
        if self.all and self.from_plan is not None:
            raise ValueError(
                "--all takes every dead letter and --from-plan a plan's jobs that died "
                "again: give one of them"
            )
        if self.all and any(v is not None for v in self.filters):
            raise ValueError(
                "--all takes every dead letter: leave it out to use filters (--error-like, "
                "--tenant, --failure-reason, --job-type, --args-like), which combine, or drop "
                "the filters"
            )
        if not self.staged and (self.sample is not None or self.max is not None):
            raise ValueError(
                "--sample and --max shape a staged plan: use them with a "
                "selector such as --error-like or --all"
            )
        return self


class PlanRef(Command):
    plan: int = Field(ge=1)


class ShowPlan(PlanRef):
    share: bool = False


class Halt(PlanRef):
    reason: str | None = Field(default=None, max_length=500)


class Resume(PlanRef):
    reason: str = Field(min_length=3, max_length=500)


class Rollback(PlanRef):
    reason: str = Field(min_length=3, max_length=500)


class Pending(ReadCommand):
    pass


class Approve(Command):
    request: int = Field(ge=1)


class Reject(Command):
    request: int = Field(ge=1)
    reason: str | None = Field(default=None, max_length=500)


# -- incidents ---------------------------------------------------------------------------


class Housekeep(Command):
    """One housekeeping run now (Parts A-F of the retry worker); ``dry_run`` only says
    what it would change."""

    dry_run: bool = False
    only: str | None = Field(default=None, max_length=20)


class Runbooks(Command):
    """The runbooks queuebot knows; with a scenario, that one in full."""

    scenario: str | None = None
    share: bool = False


# -- who is on call ----------------------------------------------------------------------


class Oncall(Command):
    """Who holds each rota now, and each owned queue's teams with their members now."""

    share: bool = False


class Whois(Command):
    """Who holds the rotas now; with a rota's name, that one."""

    rota: str | None = Field(default=None, min_length=1, max_length=80)
    share: bool = False


# -- incidents ---------------------------------------------------------------------------

_INCIDENT_REF = r"^(INC-)?[0-9]{1,9}$"


class Declare(Command):
    """Declare an incident of a scenario; from an alert thread's button, the alert group
    names the scenario (its route's) and the queue."""

    scenario: str | None = Field(default=None, min_length=1, max_length=100)
    summary: str | None = Field(default=None, min_length=3, max_length=500)
    queue: str | None = None
    alert_group: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _what(self) -> Declare:
        if self.alert_group is None and (self.scenario is None or self.summary is None):
            raise ValueError('name the scenario and say what happened: SCENARIO "SUMMARY"')
        return self


class IncidentCommand(Command):
    incident: str | None = Field(default=None, pattern=_INCIDENT_REF)

    @property
    def number(self) -> int | None:
        return None if self.incident is None else int(self.incident.removeprefix("INC-"))


class Notify(IncidentCommand):
    audience: str = Field(min_length=1, max_length=64)
    text: str | None = Field(default=None, min_length=1, max_length=3000)


class HandLead(IncidentCommand):
    """Hand the incident's lead to ``person``: a [people] name, or a Slack or Discord
    mention (or account id)."""

    person: str = Field(min_length=1, max_length=100)


class IncidentStatus(IncidentCommand):
    share: bool = False


class IncidentTimeline(IncidentCommand):
    share: bool = False


class StepDone(IncidentCommand):
    step: str = Field(min_length=1, max_length=200)
    done: str = Field(pattern=r"^done$")
    result: str | None = Field(default=None, max_length=500)


class Validate(IncidentCommand):
    pass


class Resolve(IncidentCommand):
    override: bool = False  # ask another person to approve resolving without validation
    reason: str | None = Field(default=None, min_length=3, max_length=500)

    @model_validator(mode="after")
    def _override_has_reason(self) -> Resolve:
        if self.override and self.reason is None:
            raise ValueError(
                'an override needs --reason "WHY": why the incident is over although '
                "some validation items are not done (kept in the audit trail)"
            )
        if self.reason is not None and not self.override:
            raise ValueError(
                "--reason goes with --override; without it, /incident resolve needs every "
                "validation item done"
            )
        return self


class Export(IncidentCommand):
    share: bool = False
