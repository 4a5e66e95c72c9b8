"""Alertmanager's webhook notifications of one alert group, as Alertmanager sends them:
#1 fires alert A, the next repeat it, then alert B joins (15 of 40), both repeat, both
resolve (30 of 40) and the resolution repeats. Labels ``{alertname, queue}``, a groupKey of
them, fingerprints made of the group's number, RFC 3339 times with nine fractional
digits, ``endsAt`` Go's zero time while firing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any


def phases(per_group: int) -> tuple[int, int]:
    """The indexes where B joins and where the group resolves: 15 and 30 of 40."""
    added = max(1, round(per_group * 15 / 40))
    resolved = min(max(added + 1, round(per_group * 30 / 40)), per_group - 1)
    return added, resolved


def rfc3339(at: datetime, nanos: int) -> str:
    """Alertmanager's form: UTC, nine fractional digits."""
    return f"{at:%Y-%m-%dT%H:%M:%S}.{nanos:09d}Z"


GO_ZERO_TIME = "0001-01-01T00:00:00Z"  # endsAt of a firing alert


def group_bodies(group: int, base: datetime, name: str = "") -> tuple[bytes, bytes, bytes]:
    """The three bodies a group's notifications are made of: A firing, A and B firing,
    both resolved. The group's number makes its alerts' fingerprints."""
    name = name or f"BenchAlert{group}"
    common = {"alertname": name, "queue": "clips"}
    starts = {"a": rfc3339(base, 123_456_789), "b": rfc3339(base + timedelta(minutes=1), 987_654)}
    ends = rfc3339(base + timedelta(minutes=5), 500_000_001)

    def alert(instance: str, number: int, status: str) -> dict[str, Any]:
        return {
            "status": status,
            "labels": {**common, "instance": instance, "severity": "warning"},
            "annotations": {"summary": f"{name} on instance {instance}"},
            "startsAt": starts[instance],
            "endsAt": ends if status == "resolved" else GO_ZERO_TIME,
            "generatorURL": f"http://prometheus.example:9090/graph?g0.expr=bench_{group}",
            "fingerprint": f"{group:012x}{number:04x}",
        }

    def body(status: str, alerts: list[dict[str, Any]]) -> bytes:
        shared = {k: v for k, v in alerts[0]["labels"].items()}
        said = dict(alerts[0]["annotations"])
        for other in alerts[1:]:
            shared = {k: v for k, v in shared.items() if other["labels"].get(k) == v}
            said = {k: v for k, v in said.items() if other["annotations"].get(k) == v}
        inner = ", ".join(f'{k}="{v}"' for k, v in common.items())
        return json.dumps(
            {
                "receiver": "queuebot",
                "status": status,
                "alerts": alerts,
                "groupLabels": common,
                "commonLabels": shared,
                "commonAnnotations": said,
                "externalURL": "http://alertmanager.example:9093",
                "version": "4",
                "groupKey": f"{{}}:{{{inner}}}",
                "truncatedAlerts": 0,
            }
        ).encode()

    return (
        body("firing", [alert("a", 1, "firing")]),
        body("firing", [alert("a", 1, "firing"), alert("b", 2, "firing")]),
        body("resolved", [alert("a", 1, "resolved"), alert("b", 2, "resolved")]),
    )


def sequence(group: int, base: datetime, per_group: int) -> list[bytes]:
    """The group's ``per_group`` notifications in the order Alertmanager sends them."""
    fire, both, resolved = group_bodies(group, base)
    added, over = phases(per_group)
    return [fire if n < added else both if n < over else resolved for n in range(per_group)]
