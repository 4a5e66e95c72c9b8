"""Change requests as values: what was asked, what was frozen, what happened."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

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
    REDRIVE = "redrive"


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

    def describe(self) -> str:
        if self.duplicates:
            return "duplicate queued rows"
        if self.failure_reason:
            return f"failed rows with failure_reason {self.failure_reason}"
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

    @property
    def ref(self) -> str:
        return f"CR-{self.number}"
