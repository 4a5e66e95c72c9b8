"""Staged redrive plans as values: states, the wave schedule, checks, views."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class PlanState(StrEnum):
    RUNNING = "running"
    HALTED = "halted"
    COMPLETED = "completed"
    ROLLED_BACK = "rolled_back"


ACTIVE = (PlanState.RUNNING.value, PlanState.HALTED.value)


def wave_sizes(total: int, *, sample: int, first: int, cap: int) -> list[int]:
    """Sample first, then waves of ``first``, doubling, capped at ``cap``, to ``total``."""
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
    return sizes


@dataclass(frozen=True)
class Check:
    """One precondition with its verdict: passed, failed, or not applicable (None)."""

    name: str
    passed: bool | None
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "FAILED", None: "n/a"}[self.passed]


@dataclass(frozen=True)
class Wave:
    number: int  # 0 is the sample
    size: int
    started_at: datetime
    finished_at: datetime | None = None
    succeeded: int = 0
    redead: int = 0
    skipped: int = 0
    outcome: str = "running"

    @property
    def label(self) -> str:
        return "sample" if self.number == 0 else f"wave {self.number}"


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

    @property
    def ref(self) -> str:
        return f"P-{self.number}"
