"""The ``[alerts]`` part of the TOML file: routes that send alert groups to channels, and
the built-in detectors with their thresholds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

FALLBACK_CHANNEL = "alerts"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,127}\Z")


def _name(value: str) -> str:
    if not NAME_PATTERN.match(value):
        raise ValueError(
            "expected a name of lower-case letters, digits, '-' or '_' (starting with a letter)"
        )
    return value


def _labels(value: dict[str, str]) -> dict[str, str]:
    for label in value:
        if not _LABEL.match(label):
            raise ValueError(f"{label!r} is not a Prometheus label name")
    return value


Name = Annotated[str, AfterValidator(_name)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlertRoute(Strict):
    """Alert groups whose alertname and labels match go to ``channels``; ``triage`` posts
    the queue's triage breakdown in the thread (of ``queue``, else the queue the alert's
    ``queue`` label names, else the default queue); ``scenario`` is the runbook an
    incident declared from the thread would follow."""

    name: Name
    alertname: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    labels: Annotated[dict[str, Annotated[str, Field(max_length=500)]], AfterValidator(_labels)] = (
        Field(default_factory=dict)
    )
    channels: Annotated[list[Name], Field(min_length=1, max_length=10)]
    triage: bool = False
    queue: Name | None = None
    scenario: Annotated[str, Field(min_length=1, max_length=100)] | None = None

    def matches(self, alertname: str, labels: dict[str, str]) -> bool:
        if self.alertname is not None and self.alertname != alertname:
            return False
        return all(labels.get(key) == value for key, value in self.labels.items())


class QueueLossDetector(Strict):
    """Jobs keep arriving while none reaches a terminal state, with work waiting."""

    enabled: bool = True
    minutes: int = Field(default=10, ge=2, le=24 * 60)
    min_backlog: int = Field(default=1, ge=1)


class DeadLetterGrowthDetector(Strict):
    """Dead letters grew by at least ``min_increase`` over ``window_minutes``."""

    enabled: bool = True
    window_minutes: int = Field(default=15, ge=2, le=24 * 60)
    min_increase: int = Field(default=10, ge=1)


class FailedActionableDetector(Strict):
    """Failed rows with an actionable reason (timeout, implementation_error, spawn_oom)
    above ``threshold`` for ``minutes``: the FailedJobsAccumulating alert, built in."""

    enabled: bool = True
    threshold: int = Field(default=3, ge=0)
    minutes: int = Field(default=15, ge=1, le=24 * 60)


class DetectorsConfig(Strict):
    queue_loss: QueueLossDetector = Field(default_factory=QueueLossDetector)
    dead_letter_growth: DeadLetterGrowthDetector = Field(default_factory=DeadLetterGrowthDetector)
    failed_actionable: FailedActionableDetector = Field(default_factory=FailedActionableDetector)


class AlertsConfig(Strict):
    """``channel``: where groups no route matches go. ``reopen_hours``: a group that
    fires again within this long after it resolved continues its old thread; later, it
    starts a new one. ``sample_seconds``: how often the queues are counted (the counts
    the detectors judge). ``allow_unauthenticated``: serve takes alerts without a bearer
    token (QUEUEBOT_ALERT_TOKEN unset), from anyone who reaches its port; without it,
    serve refuses to start with no token."""

    allow_unauthenticated: bool = False

    routes: list[AlertRoute] = Field(default_factory=list, max_length=200)
    channel: Name = FALLBACK_CHANNEL
    reopen_hours: float = Field(default=24.0, ge=0, le=24 * 30)
    sample_seconds: int = Field(default=60, ge=5, le=3600)
    detectors: DetectorsConfig = Field(default_factory=DetectorsConfig)
