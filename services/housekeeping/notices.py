"""Housekeeping's notices as alerts: stored in the alert inbox inside the run's
transaction, so they go through the same pipeline as Alertmanager's and the built-in
detectors' (threads per alert group, posts through the outbox, retried until they go
out).

Each kind is one alert group per queue, so its notices gather in one thread: the red
``LastRetry`` and ``RetryExhausted`` (one alert per row), the yellow
``StuckClaimsReleased`` and the ``Housekeeping`` summary (one alert per run that changed
something), and the red ``WorkerUnavailable`` (one alert per node, firing until the node
has had no trip for a whole window, however many runs see it: a trip is a failure of
the kind its profile counts against a node, ``HousekeepingParts.tripped_by``, such as
worker_queue's spawn_oom)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.alerts.model import HOUSEKEEPING
from services.alerts.payload import Alert, Notification, parse_time
from services.alerts.store import GROUPS, key_hash, store_notification

SOURCE = HOUSEKEEPING  # its threads say "From: queuebot's housekeeping", not Alertmanager
RECEIVER = "queuebot"
LAST_RETRY = "LastRetry"
EXHAUSTED = "RetryExhausted"
RELEASED = "StuckClaimsReleased"
SUMMARY = "Housekeeping"
UNAVAILABLE = "WorkerUnavailable"
SEVERITY = {
    LAST_RETRY: "critical",
    EXHAUSTED: "critical",
    UNAVAILABLE: "critical",
    RELEASED: "warning",
    SUMMARY: "info",
}
TRIPPED = "tripped_at"  # a WorkerUnavailable alert's annotation: its node's latest trip


@dataclass(frozen=True)
class Notice:
    alertname: str
    key: str  # what makes this notice one alert (a row, a run, a node)
    summary: str
    description: str
    labels: Mapping[str, str] = field(default_factory=dict)


def fingerprint(queue: str, alertname: str, key: str) -> str:
    return hashlib.sha256(f"{queue}\x00{alertname}\x00{key}".encode()).hexdigest()[:16]


def group_key(alertname: str, queue: str) -> str:
    return f'{{}}:{{alertname="{alertname}", queue="{queue}"}}'


def _common(alertname: str, queue: str) -> dict[str, str]:
    return {
        "alertname": alertname,
        "queue": queue,
        "severity": SEVERITY[alertname],
        "source": "queuebot-housekeeping",
    }


async def raise_notices(
    conn: AsyncConnection, *, queue: str, notices: Sequence[Notice], now: datetime
) -> int:
    """Store the notices, one notification per kind; how many notifications."""
    by_kind: dict[str, list[Notice]] = {}
    for notice in notices:
        by_kind.setdefault(notice.alertname, []).append(notice)
    for alertname, group in by_kind.items():
        common = _common(alertname, queue)
        alerts = [
            Alert(
                status="firing",
                labels={**common, **n.labels},
                annotations={"summary": n.summary[:500], "description": n.description[:3000]},
                startsAt=now,
                fingerprint=fingerprint(queue, alertname, n.key),
            )
            for n in group
        ]
        await _store(conn, queue=queue, alertname=alertname, alerts=alerts, now=now)
    return len(by_kind)


async def _store(
    conn: AsyncConnection, *, queue: str, alertname: str, alerts: list[Alert], now: datetime
) -> None:
    common = _common(alertname, queue)
    status: Literal["firing", "resolved"] = (
        "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    )
    first = dict(alerts[0].annotations) if len(alerts) == 1 else {}
    if len(alerts) > 1:  # the root post shows the group's annotations: name every notice
        shown = "; ".join(a.annotations.get("summary", "") for a in alerts[:10])
        more = f"; and {len(alerts) - 10} more" if len(alerts) > 10 else ""
        first = {"summary": f"{len(alerts)} notices: {shown}{more}"[:1000]}
    notification = Notification(
        version="4",
        receiver=RECEIVER,
        status=status,
        groupKey=group_key(alertname, queue),
        groupLabels={"alertname": alertname, "queue": queue},
        commonLabels=common,
        commonAnnotations=dict(first),
        alerts=alerts,
    )
    await store_notification(conn, notification, source=SOURCE, now=now)


@dataclass(frozen=True)
class NodeAlerts:
    """What a run told of unavailable nodes: newly reported, and resolved."""

    opened: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()


async def firing_nodes(conn: AsyncConnection, *, queue: str) -> dict[str, dict[str, object]]:
    """The nodes whose WorkerUnavailable alert fires now, with its stored record."""
    key = key_hash(SOURCE, RECEIVER, group_key(UNAVAILABLE, queue))
    alerts = (
        await conn.execute(sa.select(GROUPS.c.alerts).where(GROUPS.c.key_hash == key))
    ).scalar_one_or_none() or {}
    firing: dict[str, dict[str, object]] = {}
    for record in alerts.values():
        node = (record.get("labels") or {}).get("node")
        if record.get("status") == "firing" and node:
            firing[str(node)] = dict(record)
    return firing


async def report_nodes(
    conn: AsyncConnection,
    *,
    queue: str,
    tripped: Mapping[str, int],
    tripped_by: str,
    window: timedelta,
    now: datetime,
    affected: Mapping[str, Sequence[str]],
) -> NodeAlerts:
    """Fire one alert per tripped node not firing yet; keep a firing node's alert (with
    its latest trip) while it trips; resolve one whose latest trip is a window old. The
    group is sent whole, as Alertmanager does, so resolving one node leaves the others.
    ``tripped``: each node's count of the failures ``tripped_by`` names (the profile's)."""
    firing = await firing_nodes(conn, queue=queue)
    common = _common(UNAVAILABLE, queue)
    alerts: list[Alert] = []
    opened: list[str] = []
    resolved: list[str] = []
    changed = False
    minutes = int(window.total_seconds() // 60)
    for node in sorted(set(firing) | set(tripped)):
        record = firing.get(node)
        starts = parse_time(str(record.get("starts_at"))) if record else None
        annotations = dict(record.get("annotations") or {}) if record else {}  # type: ignore[call-overload]
        if node in tripped:
            count = tripped[node]
            ids = ", ".join(affected.get(node, ())) or "none with retries left"
            annotations = {
                "summary": f"Worker {node} unavailable: {tripped_by} x{count}",
                "description": (
                    f"{count} {tripped_by} failures on {node} within {minutes} min; its jobs "
                    "are re-queued with no node, so the dispatcher picks a "
                    f"healthy one. Re-queued: {ids}"
                ),
                TRIPPED: now.isoformat(),
            }
            if record is None:
                opened.append(node)
            changed = True
            alerts.append(
                _node_alert(
                    common=common,
                    node=node,
                    queue=queue,
                    status="firing",
                    starts=starts or now,
                    annotations=annotations,
                )
            )
            continue
        last = parse_time(str(annotations.get(TRIPPED))) or starts or now
        if now - last >= window:
            resolved.append(node)
            changed = True
            alerts.append(
                _node_alert(
                    common=common,
                    node=node,
                    queue=queue,
                    status="resolved",
                    starts=starts or now,
                    annotations=annotations,
                    ends=now,
                )
            )
        else:
            alerts.append(
                _node_alert(
                    common=common,
                    node=node,
                    queue=queue,
                    status="firing",
                    starts=starts or now,
                    annotations=annotations,
                )
            )
    if changed and alerts:
        await _store(conn, queue=queue, alertname=UNAVAILABLE, alerts=alerts, now=now)
    return NodeAlerts(tuple(opened), tuple(resolved))


def _node_alert(
    *,
    common: Mapping[str, str],
    node: str,
    queue: str,
    status: Literal["firing", "resolved"],
    starts: datetime,
    annotations: Mapping[str, str],
    ends: datetime | None = None,
) -> Alert:
    return Alert(
        status=status,
        labels={**common, "node": node},
        annotations={str(k): str(v) for k, v in annotations.items()},
        startsAt=starts,
        endsAt=ends,
        fingerprint=fingerprint(queue, UNAVAILABLE, node),
    )
