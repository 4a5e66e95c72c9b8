"""Change requests as values: what was asked, what was frozen, what happened."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from services.estate.model import DeadFilter

T = TypeVar("T")
CHUNK = 5000  # ids per IN (...) list: under SQLite's parameter limit
PG_CHUNK = 50_000  # PostgreSQL binds a whole list as one array parameter


def chunk_for(dialect: str) -> int:
    return PG_CHUNK if dialect == "postgresql" else CHUNK


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ChangeKind(StrEnum):
    REQUEUE = "requeue"
    CANCEL = "cancel"
    REDRIVE = "redrive"  # named jobs, all at once
    PLAN = "plan"  # a staged redrive: sample, then growing waves
    RESUME = "resume"  # a halted plan goes on
    ROLLBACK = "rollback"  # a plan's redriven, unclaimed jobs go back to dead


class RequestState(StrEnum):
    PENDING = "pending"
    EXECUTED = "executed"
    REJECTED = "rejected"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Selector:
    """What the requester named: ids, or a bulk selector resolved when frozen."""

    ids: tuple[str, ...] = ()
    duplicates: bool = False
    failure_reason: str | None = None
    error_like: str | None = None
    tenant: str | None = None
    job_type: str | None = None
    all_dead: bool = False
    plan: int | None = None  # resume / rollback: the plan concerned
    sample: int | None = None  # a plan's sample size (1-5)
    max_rows: int | None = None  # a plan's cap on rows

    def dead_filter(self) -> DeadFilter:
        """The bulk selector as the dead-letter filter /queue dlq uses."""
        return DeadFilter(
            error_like=self.error_like,
            tenant=self.tenant,
            reason=self.failure_reason,
            job_type=self.job_type,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids),
            "duplicates": self.duplicates,
            "failure_reason": self.failure_reason,
            "error_like": self.error_like,
            "tenant": self.tenant,
            "job_type": self.job_type,
            "all_dead": self.all_dead,
            "plan": self.plan,
            "sample": self.sample,
            "max_rows": self.max_rows,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Selector:
        return cls(
            ids=tuple(data.get("ids", ())),
            duplicates=bool(data.get("duplicates")),
            failure_reason=data.get("failure_reason"),
            error_like=data.get("error_like"),
            tenant=data.get("tenant"),
            job_type=data.get("job_type"),
            all_dead=bool(data.get("all_dead")),
            plan=data.get("plan"),
            sample=data.get("sample"),
            max_rows=data.get("max_rows"),
        )

    @property
    def bulk(self) -> bool:
        """Selects dead rows by what they are, not by id."""
        return self.all_dead or any(
            v is not None for v in (self.error_like, self.tenant, self.job_type)
        )

    def describe(self) -> str:
        if self.plan is not None:
            return f"plan P-{self.plan}"
        if self.duplicates:
            return "duplicate queued rows"
        if self.bulk or (self.failure_reason and not self.ids):
            parts = [
                f"error like {self.error_like!r}" if self.error_like else "",
                f"tenant {self.tenant}" if self.tenant else "",
                f"failure_reason {self.failure_reason}" if self.failure_reason else "",
                f"job type {self.job_type}" if self.job_type else "",
            ]
            chosen = ", ".join(p for p in parts if p)
            return f"dead rows with {chosen}" if chosen else "every dead row"
        return ", ".join(self.ids)


@dataclass(frozen=True)
class Target:
    """One frozen row: its key, the state it was seen in, and its full snapshot."""

    id: str  # the job id as a person reads it
    key: dict[str, Any]  # the database keys (message_job: job_id and message_id)
    state: str  # the snapshotted state execution requires
    signature: str
    row: dict[str, Any]


@dataclass(frozen=True)
class Ineligible:
    id: str
    why: str


@dataclass(frozen=True)
class Frozen:
    targets: list[Target]
    ineligible: list[Ineligible]


@dataclass(frozen=True)
class Applied:
    changed: list[str]
    skipped: list[Ineligible]
    before: list[Any]  # row images before the change (dicts, or database-built JSON)
    job_events: int = 0


@dataclass(frozen=True)
class ChangeView:
    """A change request as commands show it."""

    number: int
    kind: ChangeKind
    queue: str
    state: RequestState
    requester: str
    requested_at: datetime
    expires_at: datetime
    reason: str
    incident: str | None
    evidence: str | None
    selector: str
    eligible: int
    by_signature: list[tuple[str, int]]
    ineligible: list[Ineligible]
    approvals_required: int
    approvals: list[str] = field(default_factory=list)
    rejected_by: str | None = None
    result: dict[str, Any] | None = None
    checks: list[tuple[str, str, str]] = field(default_factory=list)  # name, verdict, detail
    schedule: list[int] = field(default_factory=list)
    plan: int | None = None

    @property
    def ref(self) -> str:
        return f"CR-{self.number}"
