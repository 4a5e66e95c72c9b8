"""What a notification changes in its alert group: pure functions, no database.

Alertmanager sends the whole group each time (at least once, again every group_interval
while something changed and every repeat_interval otherwise), so a notification is
merged alert by alert (by fingerprint) into what is known, and only real changes come out:
an alert that starts firing, one that resolves, one that fires again. The merge does not
depend on the order notifications are processed in: an alert's newer episode (a later
``startsAt``) wins, and within one episode, resolved wins over firing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from services.alerts.payload import Alert, Notification, parse_time

Status = Literal["firing", "resolved"]
_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class AlertRecord:
    fingerprint: str
    status: Status
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime | None
    ends_at: datetime | None
    generator_url: str = ""

    @classmethod
    def of(cls, alert: Alert) -> AlertRecord:
        return cls(
            fingerprint=alert.fingerprint,
            status=alert.status,
            labels=dict(alert.labels),
            annotations=dict(alert.annotations),
            starts_at=alert.startsAt,
            ends_at=alert.endsAt,
            generator_url=alert.generatorURL,
        )

    def json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "labels": self.labels,
            "annotations": self.annotations,
            "starts_at": self.starts_at.isoformat() if self.starts_at else None,
            "ends_at": self.ends_at.isoformat() if self.ends_at else None,
            "generator_url": self.generator_url,
        }

    @classmethod
    def from_json(cls, fingerprint: str, data: Mapping[str, Any]) -> AlertRecord:
        return cls(
            fingerprint=fingerprint,
            status="resolved" if data.get("status") == "resolved" else "firing",
            labels=dict(data.get("labels") or {}),
            annotations=dict(data.get("annotations") or {}),
            starts_at=parse_time(data.get("starts_at")),
            ends_at=parse_time(data.get("ends_at")),
            generator_url=str(data.get("generator_url") or ""),
        )


def _episode(record: AlertRecord) -> tuple[datetime, int]:
    """The order of what an alert reports: later episodes, then resolved over firing."""
    start = record.starts_at or _NEVER
    return (start, 1 if record.status == "resolved" else 0)


@dataclass(frozen=True)
class Merge:
    """The group's alerts after a notification, and what changed."""

    alerts: dict[str, AlertRecord]
    started: list[AlertRecord] = field(default_factory=list)  # new, or firing again
    resolved: list[AlertRecord] = field(default_factory=list)

    @property
    def firing(self) -> list[AlertRecord]:
        return [a for a in self.alerts.values() if a.status == "firing"]

    @property
    def status(self) -> Status:
        return "firing" if self.firing else "resolved"

    @property
    def changed(self) -> bool:
        return bool(self.started or self.resolved)


def merge(known: Mapping[str, AlertRecord], notification: Notification) -> Merge:
    alerts = dict(known)
    started: list[AlertRecord] = []
    resolved: list[AlertRecord] = []
    seen: set[str] = set()
    for alert in notification.alerts:
        incoming = AlertRecord.of(alert)
        seen.add(incoming.fingerprint)
        before = alerts.get(incoming.fingerprint)
        if before is not None and _episode(incoming) <= _episode(before):
            if incoming.status == before.status:  # keep the newest words of the same state
                alerts[incoming.fingerprint] = replace(
                    before, annotations=incoming.annotations or before.annotations
                )
            continue  # a repeat, or older news than what is known
        alerts[incoming.fingerprint] = incoming
        was_firing = before is not None and before.status == "firing"
        if incoming.status == "firing" and not was_firing:
            started.append(incoming)
        elif incoming.status == "resolved" and was_firing:
            resolved.append(incoming)
    if notification.status == "resolved" and notification.truncatedAlerts == 0:
        # Alertmanager says the whole group is resolved: so is any alert it left out
        for fingerprint, record in list(alerts.items()):
            if fingerprint not in seen and record.status == "firing":
                gone = replace(record, status="resolved")
                alerts[fingerprint] = gone
                resolved.append(gone)
    return Merge(alerts=alerts, started=started, resolved=resolved)


def distinct_labels(record: AlertRecord, common: Mapping[str, str]) -> dict[str, str]:
    """The labels that tell this alert from the others of its group."""
    return {k: v for k, v in sorted(record.labels.items()) if common.get(k) != v}
