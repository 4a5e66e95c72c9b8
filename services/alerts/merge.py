"""What a notification changes in its alert group: pure functions, no database.

Alertmanager sends the whole group each time (at least once, again every group_interval
while something changed and every repeat_interval otherwise), so a notification is
merged alert by alert (by fingerprint) into what is known, and only real changes come out:
an alert that starts firing, one that resolves, one that fires again. The merge does not
depend on the order notifications are processed in: an alert's newer episode (a later
``startsAt``) wins, and within one episode, resolved wins over firing.

``advance`` is the whole of what processing does to a group: the group after a
notification, and the posts of its thread that the change makes (none for a repeat).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from services.alerts import messages
from services.alerts.model import (
    AlertGroup,
    AlertPost,
    AlertRecord,
    PostReply,
    PostRoot,
    PostTriage,
    PostUpdate,
    Status,
)
from services.alerts.payload import Notification

_NEVER = datetime.min.replace(tzinfo=UTC)


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


def advance(
    group: AlertGroup, n: Notification, now: datetime, *, reopen: timedelta
) -> tuple[AlertGroup, list[AlertPost]]:
    """``group`` after ``n``, and the posts it makes. A group that fires again more than
    ``reopen`` after it resolved (or for the first time) starts a new episode: a new root
    (with the notes of alerts not shown, and the triage where its route asks for it);
    otherwise the news goes in the current episode's thread and its roots are updated."""
    result = merge(group.alerts, n)
    after = replace(
        group,
        notifications=group.notifications + 1,
        annotations=dict(n.commonAnnotations) if n.commonAnnotations else group.annotations,
        links=_links(n),
        alerts=result.alerts,
        truncated=n.truncatedAlerts,  # each notification carries the whole group
    )
    if not result.changed:
        return after, []
    before = group.status
    after = replace(after, status=result.status, changed_at=now)
    resolved_at = group.resolved_at
    if result.status == "resolved" and before == "firing":
        resolved_at = now
    elif result.status == "firing":
        resolved_at = None
    if before != "firing" and result.status == "firing":
        last = group.resolved_at
        if group.episode == 0 or last is None or now - last > reopen:
            episode = group.episode + 1
            after = replace(after, episode=episode, resolved_at=resolved_at)
            return after, _new_episode(after, n)
    after = replace(after, resolved_at=resolved_at)
    return after, _news(group, n, result, now)


def _new_episode(group: AlertGroup, n: Notification) -> list[AlertPost]:
    posts: list[AlertPost] = [PostRoot(group.id, group.episode)]
    if n.truncatedAlerts:
        posts.append(PostReply(group.id, group.episode, messages.not_shown(n.truncatedAlerts)))
    if group.route.triage and group.queue:
        posts.append(PostTriage(group.id, group.episode))
    return posts


def _news(group: AlertGroup, n: Notification, result: Merge, now: datetime) -> list[AlertPost]:
    """The news of a change in the current episode (``group`` as it was before)."""
    refired = group.status != "firing" and result.status == "firing"
    group_resolved = group.status == "firing" and result.status == "resolved"
    started = min((a.starts_at for a in result.alerts.values() if a.starts_at), default=None)
    message = messages.news(
        started=result.started,
        resolved=result.resolved,
        common=group.labels,
        group_resolved=group_resolved,
        refired=refired,
        lasted=messages.lasted(started, now) if group_resolved else None,
        not_shown=n.truncatedAlerts,
        voice=messages.voice(group.source),
    )
    return [
        # the group fired again or resolved as a whole: a turn
        PostReply(group.id, group.episode, message, turn=refired or group_resolved),
        PostUpdate(group.id, group.episode),
    ]


def _links(n: Notification) -> dict[str, str]:
    links: dict[str, str] = {}
    source = next((a.generatorURL for a in n.alerts if a.generatorURL), "")
    if source:
        links["Source"] = source
    if n.externalURL:
        links["Alertmanager"] = n.externalURL
    return links
