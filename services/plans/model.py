"""Staged redrive plans as values: states, the wave schedule, checks, the plan's rows as
typed records, views and the news a plan posts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from services.changes.model import OVERRIDDEN
from services.estate.profile import as_utc


class PlanState(StrEnum):
    RUNNING = "running"
    HALTED = "halted"
    COMPLETED = "completed"
    ROLLED_BACK = "rolled_back"
    CLOSED = "closed"  # ended with nothing to roll back, without an approval


ACTIVE = (PlanState.RUNNING, PlanState.HALTED)


class ItemState(StrEnum):
    """Where one job of a plan is."""

    WAITING = "waiting"  # its wave has not started
    REDRIVEN = "redriven"  # redriven, outcome not known yet
    SKIPPED = "skipped"  # had moved on before its wave: left alone
    SUCCEEDED = "succeeded"
    REDEAD = "redead"  # dead again after the redrive
    ROLLED_BACK = "rolled_back"
    # left the table after the redrive, where that says nothing of how it ended (the
    # queue's ``deleted_jobs`` rule): neither succeeded nor dead again, as far as is known
    UNKNOWN = "unknown"


# Items that were redriven, whatever came of it.
REDRIVEN_STATES = (
    ItemState.REDRIVEN,
    ItemState.SUCCEEDED,
    ItemState.REDEAD,
    ItemState.ROLLED_BACK,
    ItemState.UNKNOWN,
)


def wave_sizes(total: int, *, sample: int, first: int, cap: int) -> list[int]:
    """Sample first, then waves of ``first``, doubling, capped at ``cap``, to ``total``.
    A last wave of one row is folded into the wave before it (3 + 10 + 20 + 41, not
    3 + 10 + 20 + 40 + 1; that wave may pass the cap by one), never into the sample."""
    sizes: list[int] = []
    left = total
    if left > 0:
        sizes.append(min(sample, left))
        left -= sizes[-1]
    size = min(first, cap)
    while left > 0:
        sizes.append(min(size, left))
        left -= sizes[-1]
        size = min(size * 2, cap)
    if len(sizes) > 2 and sizes[-1] == 1:
        last = sizes.pop()
        sizes[-1] += last
    return sizes


@dataclass(frozen=True)
class Check:
    """One precondition with its verdict: passed, failed, or not applicable (None); a
    failed one the requester overrode (``overridden``: by whom and why) refuses nothing."""

    name: str
    passed: bool | None
    detail: str
    overridden: str | None = None

    @property
    def verdict(self) -> str:
        if self.overridden is not None:
            return OVERRIDDEN
        return {True: "ok", False: "FAILED", None: "n/a"}[self.passed]


class WaveOutcome(StrEnum):
    RUNNING = "running"
    OK = "ok"
    HALTED = "halted"
    ROLLED_BACK = "rolled_back"  # the plan was rolled back while this wave was out


class Wave(BaseModel):
    """One wave as the plan row's ``waves`` JSON keeps it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    number: int  # 0 is the sample
    size: int
    started_at: datetime
    changed: int = 0  # taken out of the dead letters when it started
    skipped: int = 0  # had moved on since the request: left alone
    finished_at: datetime | None = None
    succeeded: int = 0
    redead: int = 0
    rolled_back: int = 0  # returned to the dead letters by the plan's rollback
    unknown: int = 0  # left the table with an outcome queuebot cannot know
    outcome: WaveOutcome = WaveOutcome.RUNNING

    @property
    def label(self) -> str:
        return "sample" if self.number == 0 else f"wave {self.number}"

    @property
    def owner(self) -> str:
        """The wave as the owner of its jobs: "the sample's", "wave 2's"."""
        return "the sample's" if self.number == 0 else f"wave {self.number}'s"


class Waves(BaseModel):
    """The plan row's ``waves`` JSON: the schedule and the waves started so far."""

    model_config = ConfigDict(frozen=True)

    schedule: list[int]
    waves: list[Wave] = []

    @property
    def current(self) -> Wave | None:
        return self.waves[-1] if self.waves else None

    def with_wave(self, wave: Wave) -> Waves:
        """These waves with ``wave`` added, or put in place of the one with its number."""
        kept = [w for w in self.waves if w.number != wave.number]
        return Waves(schedule=self.schedule, waves=sorted([*kept, wave], key=lambda w: w.number))

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class PlanRow:
    """One row of ``qb_plans``."""

    id: int
    queue: str
    profile: str
    request_id: int
    state: PlanState
    reason: str
    incident: str | None
    requester: str
    approvers: list[str]
    sample: int
    max_wave: int
    velocity: float
    poll_seconds: float
    total: int
    cursor: int
    wave: int
    wave_size: int
    wave_started_at: datetime | None
    dead_at_wave_start: int
    waves: Waves
    note: str | None
    origin: dict[str, Any]
    message_ref: dict[str, str] | None
    created_at: datetime
    updated_at: datetime

    @property
    def ref(self) -> str:
        return f"P-{self.id}"

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> PlanRow:
        return cls(
            id=int(row["id"]),
            queue=row["queue"],
            profile=row["profile"],
            request_id=int(row["request_id"]),
            state=PlanState(row["state"]),
            reason=row["reason"],
            incident=row["incident"],
            requester=row["requester"],
            approvers=list(row["approvers"]["people"]),
            sample=int(row["sample"]),
            max_wave=int(row["max_wave"]),
            velocity=float(row["velocity"]),
            poll_seconds=float(row["poll_seconds"]),
            total=int(row["total"]),
            cursor=int(row["cursor"]),
            wave=int(row["wave"]),
            wave_size=int(row["wave_size"]),
            wave_started_at=as_utc(row["wave_started_at"]),
            dead_at_wave_start=int(row["dead_at_wave_start"]),
            waves=Waves.model_validate(row["waves"]),
            note=row["note"],
            origin=dict(row["origin"] or {}),
            message_ref=row["message_ref"] or None,
            created_at=_utc(row["created_at"]),
            updated_at=_utc(row["updated_at"]),
        )


@dataclass(frozen=True)
class PlanItemRow:
    """One row of ``qb_plan_items``: a job of the plan, in plan order."""

    plan_id: int
    seq: int
    job_id: str
    part: str | None  # the row of the job the plan changes, where a job has several
    wave: int | None
    state: ItemState
    signature: str
    original: dict[str, Any]  # its frozen state, then what a rollback puts back

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> PlanItemRow:
        return cls(
            plan_id=int(row["plan_id"]),
            seq=int(row["seq"]),
            job_id=str(row["job_id"]),
            part=row["message_id"],
            wave=row["wave"],
            state=ItemState(row["state"]),
            signature=row["signature"],
            original=dict(row["original"] or {}),
        )


@dataclass(frozen=True)
class PlanView:
    number: int
    queue: str
    state: PlanState
    request: int
    reason: str
    requester: str
    approvers: list[str]
    total: int
    redriven: int
    succeeded: int
    redead: int
    schedule: list[int]
    waves: list[Wave]
    note: str | None
    updated_at: datetime
    rolled_back: int = 0
    incident: str | None = None
    message_ref: dict[str, str] | None = field(default=None)
    unknown: int = 0  # left the table with an outcome queuebot cannot know

    @property
    def ref(self) -> str:
        return f"P-{self.number}"


@dataclass(frozen=True)
class Note:
    """A line of news for the plan's thread (halted, resumed, waiting...)."""

    text: str


@dataclass(frozen=True)
class WaveStarted:
    wave: int


@dataclass(frozen=True)
class WaveFinished:
    wave: int


News = Note | WaveStarted | WaveFinished


def news_json(news: list[News]) -> list[dict[str, Any]]:
    """News as the outbox keeps it."""
    out: list[dict[str, Any]] = []
    for item in news:
        if isinstance(item, Note):
            out.append({"note": item.text})
        elif isinstance(item, WaveStarted):
            out.append({"started": item.wave})
        else:
            out.append({"finished": item.wave})
    return out


def news_from(data: list[dict[str, Any]]) -> list[News]:
    out: list[News] = []
    for item in data:
        if "note" in item:
            out.append(Note(str(item["note"])))
        elif "started" in item:
            out.append(WaveStarted(int(item["started"])))
        else:
            out.append(WaveFinished(int(item["finished"])))
    return out


def _utc(value: datetime) -> datetime:
    out = as_utc(value)
    if out is None:
        raise ValueError("a plan timestamp is missing")
    return out
