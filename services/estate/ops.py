"""What a queue profile's guarded writes take and give: the values every profile shares,
and the two interfaces each profile implements.

``RowChanges``  find and freeze the rows a requeue, cancel or redrive names, then change
                exactly those still in their frozen state (the guarded UPDATE).
``PlanOps``     what a staged redrive needs beyond that: candidates for a bulk selector,
                per-job checks, each wave's outcome and the rollback.

Both work inside the caller's transaction (they take its connection and never commit):
the change-request workflow and the plan engine above decide where a transaction starts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit.row_digest import Digest
from services.estate.model import DeadFilter

T = TypeVar("T")
CHUNK = 5000  # ids per IN (...) list: under SQLite's parameter limit
PG_CHUNK = 50_000  # PostgreSQL binds a whole list as one array parameter


def chunk_for(dialect: str) -> int:
    return PG_CHUNK if dialect == "postgresql" else CHUNK


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def chunks_of_whole(
    items: Sequence[T], size: int, key: Callable[[T], Hashable]
) -> Iterator[list[T]]:
    """``items`` in chunks of about ``size``, never splitting the items of one ``key``
    between two chunks (a chunk grows past ``size`` rather than split a key's items)."""
    grouped: dict[Hashable, list[T]] = {}
    for item in items:
        grouped.setdefault(key(item), []).append(item)
    chunk: list[T] = []
    for members in grouped.values():
        if chunk and len(chunk) + len(members) > size:
            yield chunk
            chunk = []
        chunk.extend(members)
    if chunk:
        yield chunk


class Action(StrEnum):
    """The row changes a profile knows how to make."""

    REQUEUE = "requeue"
    CANCEL = "cancel"
    REDRIVE = "redrive"


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
    # a plan's jobs that died again (still dead when frozen), as a selector of its own
    from_plan: int | None = None
    sample: int | None = None  # a plan's sample size (1-5)
    max_rows: int | None = None  # a plan's cap on rows
    # the requester goes ahead although the dead letters are growing (with the approval)
    override_growth: bool = False
    args_like: str | None = None  # dead rows whose job's arguments hold this text
    # the ids name jobs, never a job's row by its own id (a plan's candidates): a profile
    # with several rows per job looks them up by job alone
    ids_name_jobs: bool = False

    def dead_filter(self) -> DeadFilter:
        """The bulk selector as the dead-letter filter /queue dlq uses."""
        return DeadFilter(
            error_like=self.error_like,
            tenant=self.tenant,
            reason=self.failure_reason,
            job_type=self.job_type,
            args_like=self.args_like,
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
            "from_plan": self.from_plan,
            "override_growth": self.override_growth,
            "args_like": self.args_like,
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
            from_plan=data.get("from_plan"),
            override_growth=bool(data.get("override_growth")),
            args_like=data.get("args_like"),
        )

    @property
    def bulk(self) -> bool:
        """Selects dead rows by what they are, not by id."""
        return self.all_dead or any(
            v is not None
            for v in (self.error_like, self.tenant, self.job_type, self.args_like, self.from_plan)
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
                f"arguments like {self.args_like!r}" if self.args_like else "",
            ]
            chosen = ", ".join(p for p in parts if p)
            if self.from_plan is not None:
                again = f"P-{self.from_plan}'s jobs dead again"
                return f"{again}, with {chosen}" if chosen else again
            return f"dead rows with {chosen}" if chosen else "every dead row"
        return ", ".join(self.ids)


@dataclass(frozen=True, slots=True)  # slots: a large request holds 100,000 of them
class Target:
    """One frozen row: its key, the state it was seen in, and its full snapshot (``row``,
    where queuebot builds the image; empty where the database copies it into the
    request's items itself).

    ``part`` names the row within the job that the change touches where a job has several
    (message_job: the dead-lettered message); None where a job is one row."""

    id: str  # the job id as a person reads it
    # the database keys, as the profile needs them back; empty where the profile keeps the
    # request's items in the database (``ChangesInDatabase``), which builds them there
    key: dict[str, Any]
    state: str  # the snapshotted state execution requires
    signature: str
    row: dict[str, Any]
    part: str | None = None
    # the row's version when frozen, where the database has one (PostgreSQL: xmin), so
    # that what is kept is the row that was judged
    version: str | None = None

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Target:
        """A target as a request made before requests kept their rows as items kept it in
        its own JSON (without its snapshot row)."""
        key = item["key"]
        return cls(
            id=item["id"],
            key=key,
            state=item["state"],
            signature=item["signature"],
            row={},
            part=item.get("part", key.get("message_id")),  # requests stored before ``part``
        )


@dataclass(frozen=True, slots=True)
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
    # (item, image): each changed row's image just before the change (a dict, or JSON the
    # database built), with the part it is (or its job id where a job is one row)
    before: list[tuple[str, Any]]
    job_events: int = 0


@dataclass(frozen=True)
class Kept:
    """What a change made from its request's items in the database did: how many items
    there were, the jobs changed, the job events written, and the digest of the changed
    rows' images from just before the change."""

    items: int  # the request's items, changed or not
    changed: list[str]
    job_events: int
    before: Digest


@dataclass(frozen=True)
class ItemRef:
    """One plan item as the profile needs it: the job, the part of it the plan changes,
    and what a rollback must put back (empty until its wave starts)."""

    job_id: str
    part: str | None
    original: dict[str, Any]

    @property
    def ref(self) -> str:
        """The key of this item's original values: its part where it has one."""
        return self.part or self.job_id


@dataclass(frozen=True, slots=True)
class Death:
    """A row that entered the dead state: its job, and when, as the estate records it."""

    job: str
    at: datetime


@dataclass(frozen=True)
class WaveStatus:
    terminal: int
    open: int
    redead: list[tuple[str, str | None]] = field(default_factory=list)  # (job, new error)
    # succeeded: in a success state, or none of its rows in the table any more where the
    # queue's rule says such a job succeeded (``QueueProfile.deleted_jobs``)
    succeeded: list[str] = field(default_factory=list)
    # jobs none of whose rows is in the table any more, where the queue's rule leaves the
    # outcome of such a job unknown (something may delete failed jobs too)
    unknown: list[str] = field(default_factory=list)
    # jobs with a row still queued or running (a job may have several rows)
    open_jobs: list[str] = field(default_factory=list)
    # each dead-again job's failure signature, made as its frozen target's signature was
    # (so the same failure compares equal); a profile whose targets' signature is the
    # error text's own leaves it empty, and the error text's signature is taken
    signatures: dict[str, str] = field(default_factory=dict)
    # the same failure as an earlier version of the profile froze it, where that differed
    # (a plan frozen before an upgrade compares its rows with these too)
    earlier_signatures: dict[str, str] = field(default_factory=dict)


class RowChanges(Protocol):
    async def freeze(self, conn: AsyncConnection, *, action: Action, selector: Selector) -> Frozen:
        """Find the target rows, decide eligibility and snapshot them. Read-only."""
        ...

    async def apply(
        self,
        conn: AsyncConnection,
        *,
        action: Action,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        """Change exactly the targets still in their snapshotted state, set-based, inside
        the caller's transaction; report the rest as skipped."""
        ...


@runtime_checkable
class ChangesInDatabase(Protocol):
    """A profile's ``RowChanges`` that, on some databases, keep a request's rows in the
    database: the request copies each target's image into the request's items with one
    statement, and the approval changes the queue from those items with one statement,
    so no row image passes through queuebot."""

    def in_database(self, dialect: str) -> bool:
        """Whether this database takes the two statements (else the Python path runs)."""
        ...

    async def keep(
        self, conn: AsyncConnection, *, request: int, targets: list[Target], first: int = 0
    ) -> Digest:
        """Copy the targets, each still as it was judged (its state and its version), and
        their images into the request's items, numbered from ``first``; the digest of
        these images and of their keys."""
        ...

    async def apply_kept(
        self, conn: AsyncConnection, *, request: int, action: Action, now: datetime, note: str
    ) -> Kept:
        """Change the request's items still in their frozen state, keeping each one's image
        from just before the change in its item."""
        ...


def in_database(changes: RowChanges, dialect: str) -> ChangesInDatabase | None:
    """``changes`` where they keep a request's rows in this database, else None (the
    Python path: the images built by queuebot)."""
    if isinstance(changes, ChangesInDatabase) and changes.in_database(dialect):
        return changes
    return None


class PlanOps(Protocol):
    @property
    def has_sources(self) -> bool:
        """Whether the estate names a source object per job that queuebot can check."""
        ...

    async def candidate_query(self, conn: AsyncConnection, *, selector: Selector) -> sa.Select[Any]:
        """The ids of the jobs with dead rows matching a bulk selector, each once, newest
        first: one column, to be read a page at a time (a plan's freeze streams it)."""
        ...

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        """``candidate_query``'s ids, all at once."""
        ...

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        """Jobs whose source object is gone, with why (empty where there is none)."""
        ...

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        """How many times each job was redriven before."""
        ...

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        """What a rollback must put back, read just before the rows are redriven, keyed
        by ``ItemRef.ref``."""
        ...

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus: ...

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        """Return redriven jobs nobody claimed yet to their dead state; the rolled back."""
        ...

    async def unclaimed(self, conn: AsyncConnection, *, items: list[ItemRef]) -> list[str]:
        """The jobs of ``items`` a rollback would return now (redriven, still waiting for a
        worker: the rollback's own guard). Read-only."""
        ...

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        """Remember redrives where the estate keeps no events of its own."""
        ...

    async def dead_since(self, conn: AsyncConnection, *, since: datetime) -> list[Death] | None:
        """The rows that died (entered the dead state) since ``since``, each with its job
        and when, where the estate records when rows die; None where it does not (the
        growth check then compares counts queuebot wrote down)."""
        ...


def restored(column: str, value: Any) -> Any:
    """A value kept in a plan item's JSON, as the column takes it back: timestamps were
    stored as ISO text."""
    if isinstance(value, str) and column.endswith("_at"):
        return datetime.fromisoformat(value)
    return value
