"""What queue reads return: plain, immutable values, the same for every profile."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class CanonicalState(StrEnum):
    """Profile states mapped onto one vocabulary so commands read the same everywhere."""

    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # a status the profile does not know; shown, never acted on


# The canonical states of a dead letter: what /queue dlq lists and a redrive takes out.
DEAD_LETTER_STATES = (CanonicalState.FAILED, CanonicalState.DEAD)
# What a failure-reason breakdown calls rows whose reason is empty.
NO_REASON = "(none)"


@dataclass(frozen=True)
class StatusCount:
    status: str
    canonical: CanonicalState
    count: int
    # True where the count is an estimate rather than a count: the succeeded rows of a
    # large table, from PostgreSQL's statistics; or, on a large table of a system that
    # deletes its successes, its waiting rows, from a sample (services/estate/estimate.py
    # says when). Never a dead or running count.
    estimated: bool = False


@dataclass(frozen=True)
class Count:
    """A count under one key (a failure reason, a signature, a tenant, a job type)."""

    key: str
    count: int


@dataclass(frozen=True)
class TypeCounts:
    """Per job type (or tenant): rows in each canonical state."""

    key: str
    total: int
    by_state: dict[CanonicalState, int]
    # the states whose counts here (and so the total) come from a sample of the table
    # (``Triage.sampled_rows``), not a count
    estimated: tuple[CanonicalState, ...] = ()


@dataclass(frozen=True)
class Triage:
    queue: str
    profile: str
    taken_at: datetime
    since: datetime | None
    total: int
    by_status: list[StatusCount]
    status_title: str
    by_job_status: list[StatusCount] = field(default_factory=list)
    by_reason: list[Count] = field(default_factory=list)
    by_signature: list[Count] = field(default_factory=list)
    signatures_of: int = 0  # how many of the newest dead rows by_signature covers
    signatures_total: int = 0  # of how many dead rows in all
    signature_groups: int = 0  # how many signatures those rows have (by_signature: the top)
    type_title: str = "job type"
    by_type_dead_only: bool = False  # by_type counts the signature sample's dead rows only
    by_type: list[TypeCounts] = field(default_factory=list)
    # where by_type is cut to its top (the signature sample's tenants): how many in all
    type_groups: int = 0
    oldest_pending_at: datetime | None = None
    stuck: int = 0
    duplicate_groups: int = 0
    duplicate_rows: int = 0
    duplicates_of_active: int = 0
    # False where the team's table cannot tell duplicates (worker_queue without
    # issue_number): the reply then prints no duplicate count at all.
    duplicates_detected: bool = True
    # How the profile names things, so replies need not know which profile it is:
    unit: str = "jobs"  # what total counts
    dead_title: str = "Failed"  # what the signature breakdown covers
    duplicate_label: str = "issues queued twice"  # what duplicate_groups counts
    # The dead letters by the status of their job, where a dead letter is one row of a
    # job kept elsewhere (message_job: DLQ messages by their clip job's status).
    dead_letter_jobs: list[StatusCount] = field(default_factory=list)
    # What this queue's triage leaves out because the team's table lacks an optional column.
    notes: list[str] = field(default_factory=list)
    # The canonical states whose rows are dead letters on this queue (the profile's
    # ``dead_letter_states``): what /queue dlq lists and a redrive takes out.
    dead_states: tuple[CanonicalState, ...] = DEAD_LETTER_STATES
    # Where the estimated counts (``StatusCount.estimated``) come from a sample of the
    # table's pages rather than its statistics: how many jobs the sample read, of about
    # how many in all, the percentage of the pages it read, and each sampled state's
    # error (one standard error, as a share of its count), measured from the sample
    # (0 and empty: no sample).
    sampled_rows: int = 0
    sampled_of: int = 0
    sampled_percent: float = 0.0
    sample_errors: dict[str, float] = field(default_factory=dict)

    @property
    def oldest_pending_age(self) -> timedelta | None:
        if self.oldest_pending_at is None:
            return None
        return max(self.taken_at - self.oldest_pending_at, timedelta(0))

    @property
    def total_estimated(self) -> bool:
        """Whether ``total`` includes an estimated count (see ``StatusCount.estimated``)."""
        return any(s.estimated for s in self.by_status)

    def count_in(self, state: CanonicalState) -> int:
        return sum(s.count for s in self.by_status if s.canonical is state)

    @property
    def dead_letter_parts(self) -> list[StatusCount]:
        """The statuses of ``by_status`` that hold dead letters: failed and dead ones."""
        return [s for s in self.by_status if s.canonical in self.dead_states]

    @property
    def dead_letters(self) -> int:
        """The headline count: rows in a failed or dead state, which is what /queue dlq
        lists and what a redrive takes out (``QueueProfile.dead_letter_statuses``)."""
        return sum(s.count for s in self.dead_letter_parts)


@dataclass(frozen=True)
class JobEvent:
    event_type: str
    message: str | None
    created_at: datetime | None


@dataclass(frozen=True)
class Section:
    """A titled group of related rows shown with a job (its messages, its asset...)."""

    title: str
    rows: list[dict[str, object]]


@dataclass(frozen=True)
class JobDetail:
    queue: str
    job_id: str
    status: str
    canonical: CanonicalState
    row: dict[str, object]
    sections: list[Section]
    events: list[JobEvent]
    events_note: str | None = None


@dataclass(frozen=True)
class JobSummary:
    """One job in a listing (dead letters, stuck rows)."""

    id: str
    status: str
    canonical: CanonicalState
    reason: str | None
    error: str | None
    group: str | None
    attempts: int | None
    at: datetime | None
    message_id: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class JobList:
    total: int
    rows: list[JobSummary]
    attempts_label: str = "tries"  # what ``JobSummary.attempts`` counts (the profile's)


@dataclass(frozen=True)
class DuplicateGroup:
    key: str
    ids: list[str]
    note: str


@dataclass(frozen=True)
class DeadFilter:
    error_like: str | None = None
    tenant: str | None = None
    reason: str | None = None
    job_type: str | None = None
    limit: int = 20
    args_like: str | None = None  # the job's arguments hold this text (args_like.py)
    # only these jobs (a plan's that died again: /queue dlq --from-plan); None: any job
    job_ids: tuple[str, ...] | None = None
