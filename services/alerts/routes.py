"""Which channels an alert group goes to, and what comes with it there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.config.alerts import AlertRoute, AlertsConfig

FAILED_JOBS = "FailedJobsAccumulating"
FAILED_JOBS_SCENARIO = "gd:failed-jobs-accumulating"  # the shipped runbook's scenario


@dataclass(frozen=True)
class Destination:
    route: str
    channels: tuple[str, ...]
    triage: bool
    queue: str | None
    scenario: str | None = None

    def json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "channels": list(self.channels),
            "triage": self.triage,
            "queue": self.queue,
            "scenario": self.scenario,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Destination:
        return cls(
            route=str(data.get("route") or "default"),
            channels=tuple(str(c) for c in data.get("channels") or ()),
            triage=bool(data.get("triage")),
            queue=data.get("queue"),
            scenario=data.get("scenario"),
        )


def built_in(config: AlertsConfig) -> list[AlertRoute]:
    """After the team's own routes: FailedJobsAccumulating comes with its triage."""
    return [
        AlertRoute(
            name="failed-jobs-accumulating",
            alertname=FAILED_JOBS,
            channels=[config.channel],
            triage=True,
            scenario=FAILED_JOBS_SCENARIO,
        )
    ]


def destination(
    config: AlertsConfig, *, alertname: str, labels: Mapping[str, str], queues: Sequence[str]
) -> Destination:
    """The first route that matches (the team's, then the built-in ones), else the
    fallback channel. The queue is the route's, else the one the ``queue`` label names
    when it is configured, else (no ``queue`` label at all) the default queue."""
    plain = dict(labels)
    for route in [*config.routes, *built_in(config)]:
        if route.matches(alertname, plain):
            return Destination(
                route=route.name,
                channels=tuple(route.channels),
                triage=route.triage,
                queue=route.queue or _queue_of(plain, queues),
                scenario=route.scenario,
            )
    return Destination("default", (config.channel,), False, _queue_of(plain, queues))


def _queue_of(labels: Mapping[str, str], queues: Sequence[str]) -> str | None:
    named = labels.get("queue")
    if named is None:
        return queues[0] if queues else None
    return named if named in queues else None
