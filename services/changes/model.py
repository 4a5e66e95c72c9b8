"""Change requests as values: what was asked, what was frozen, what happened, and the
request's row as a typed record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from services.db.on_commit import PostFailure
from services.estate.ops import Ineligible, Selector
from services.estate.profile import as_utc

OVERRIDDEN = "overridden"  # the verdict of a failed check the requester went ahead of


class RequestState(StrEnum):
    PENDING = "pending"
    EXECUTED = "executed"
    REJECTED = "rejected"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Executed:
    """What an executed request did (its row's ``result``)."""

    approvers: list[str]
    changed: list[str] = field(default_factory=list)
    skipped: list[Ineligible] = field(default_factory=list)
    job_events: int = 0
    plan: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "approvers": self.approvers,
            "changed": self.changed,
            "skipped": [[s.id, s.why] for s in self.skipped],
            "job_events": self.job_events,
            "plan": self.plan,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Executed:
        return cls(
            approvers=list(data.get("approvers", [])),
            changed=[str(c) for c in data.get("changed", [])],
            skipped=[Ineligible(str(i), str(w)) for i, w in data.get("skipped", [])],
            job_events=int(data.get("job_events") or 0),
            plan=data.get("plan"),
        )


@dataclass(frozen=True)
class Rejection:
    """Who rejected a request (its row's ``result``), and whether it was withdrawn."""

    rejected_by: str
    reason: str | None
    withdrawn: bool

    def as_json(self) -> dict[str, Any]:
        return {"rejected_by": self.rejected_by, "reason": self.reason, "withdrawn": self.withdrawn}


@dataclass(frozen=True)
class Preview:
    """What a request showed when it was made (its row's ``preview``)."""

    by_signature: list[tuple[str, int]]
    checks: list[tuple[str, str, str]]  # name, verdict, detail
    schedule: list[int]
    plan: int | None
    # the plan whose incident the request took, where nobody named one (``--from-plan``,
    # a resume, a rollback): its preview says "INC-1 (from P-1)"
    incident_from: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "by_signature": [[s, n] for s, n in self.by_signature],
            "checks": [list(c) for c in self.checks],
            "schedule": self.schedule,
            "plan": self.plan,
            "incident_from": self.incident_from,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Preview:
        return cls(
            by_signature=[(str(s), int(n)) for s, n in data.get("by_signature", [])],
            checks=[(str(n), str(v), str(d)) for n, v, d in data.get("checks", [])],
            schedule=[int(n) for n in data.get("schedule", [])],
            plan=data.get("plan"),
            incident_from=data.get("incident_from"),
        )


@dataclass(frozen=True)
class RequestRow:
    """One row of ``qb_change_requests``, without its frozen targets (read those with
    ``store.targets`` when executing: ten thousand of them are not needed elsewhere)."""

    id: int
    kind: str  # the name its kind registered (services/changes/kinds.py)
    queue: str
    profile: str
    state: RequestState
    requested_at: datetime
    expires_at: datetime
    requester_person: str
    requester_platform: str
    requester_account: str
    reason: str
    incident: str | None
    evidence: str | None
    selector: Selector
    ineligible: list[Ineligible]
    snapshot_hash: str
    preview: Preview
    eligible_count: int
    approvals_required: int
    decided_at: datetime | None
    executed: Executed | None
    rejection: Rejection | None
    origin: dict[str, Any]

    @property
    def ref(self) -> str:
        return f"CR-{self.id}"

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> RequestRow:
        state = RequestState(row["state"])
        result = row["result"] or {}
        return cls(
            id=int(row["id"]),
            kind=str(row["kind"]),
            queue=row["queue"],
            profile=row["profile"],
            state=state,
            requested_at=_utc(row["requested_at"]),
            expires_at=_utc(row["expires_at"]),
            requester_person=row["requester_person"],
            requester_platform=row["requester_platform"],
            requester_account=row["requester_account"],
            reason=row["reason"],
            incident=row["incident"],
            evidence=row["evidence"],
            selector=Selector.from_json(row["selector"]),
            ineligible=[Ineligible(str(i), str(w)) for i, w in row["ineligible"]["items"]],
            snapshot_hash=row["snapshot_hash"],
            preview=Preview.from_json(row["preview"]),
            eligible_count=int(row["eligible_count"]),
            approvals_required=int(row["approvals_required"]),
            decided_at=as_utc(row["decided_at"]),
            executed=Executed.from_json(result) if state is RequestState.EXECUTED else None,
            rejection=(
                Rejection(
                    rejected_by=str(result.get("rejected_by")),
                    reason=result.get("reason"),
                    withdrawn=bool(result.get("withdrawn")),
                )
                if state is RequestState.REJECTED
                else None
            ),
            origin=dict(row["origin"] or {}),
        )


@dataclass(frozen=True)
class Said:
    """What a request's kind says of it, in the words of the domain that owns the kind:
    its headline, the line of its outcome once executed, whether its selection is shown,
    the title of its checks and whether a requester's overridden check is pointed out."""

    headline: str
    outcome: str | None = None
    selection: bool = True
    checks_title: str = "Preconditions"
    overrides: bool = True


@dataclass(frozen=True)
class ChangeView:
    """A change request as commands show it."""

    number: int
    kind: str
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
    rejection_reason: str | None = None
    withdrawn: bool = False  # rejected by its own requester
    result: Executed | None = None
    checks: list[tuple[str, str, str]] = field(default_factory=list)  # name, verdict, detail
    schedule: list[int] = field(default_factory=list)
    plan: int | None = None
    incident_from: int | None = None  # the plan whose incident it took (``Preview``)
    # who may still approve it, where known (the approvers but its requester and those
    # who approved it already)
    can_approve: tuple[str, ...] = ()
    # while pending: why it needs more than one approval and the other way out, or why a
    # staged redrive of many rows needs one (services/changes/quorum.py, ``note``)
    quorum_note: str | None = None
    # what its kind says of it (services/changes/words.py); None: not asked yet
    said: Said | None = field(default=None, compare=False)

    @property
    def ref(self) -> str:
        return f"CR-{self.number}"


def _utc(value: datetime) -> datetime:
    out = as_utc(value)
    if out is None:
        raise ValueError("a change request timestamp is missing")
    return out


@dataclass(frozen=True)
class Decision:
    """What an approval did: the request as it stands, whether it executed, the approvals
    so far, and how its chat posts went."""

    view: ChangeView
    executed: bool
    approvals: int
    post_failures: tuple[PostFailure, ...] = field(default=())
    # its chat posts were still going out when the answer was due: they go on behind it
    posts_pending: bool = False
