"""The alerts' typed records: an alert as its group keeps it, an alert group, where its
root messages are, the notifications set aside, and the posts of a group's thread.

A post is one record per kind (``PostRoot``, ``PostUpdate``, ``PostReply``,
``PostTriage``). The outbox keeps it as JSON: ``to_payload`` and ``post_from_payload`` are
the only conversion, and they keep the keys every earlier version wrote, so posts queued
before an upgrade are delivered after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from services.alerts.payload import Alert, parse_time
from services.alerts.routes import Destination
from services.message import Message, message_from_json, message_json
from services.notify import MessageRef

Status = Literal["firing", "resolved"]
DETECTOR = "detector"  # the source of the groups queuebot's own detectors raise
HOUSEKEEPING = "housekeeping"  # the source of queuebot's housekeeping notices


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


def records(alerts: Mapping[str, Any] | None) -> dict[str, AlertRecord]:
    """A group's stored alerts (``{fingerprint: record's JSON}``) as records."""
    return {fp: AlertRecord.from_json(fp, data) for fp, data in (alerts or {}).items()}


@dataclass(frozen=True)
class Roots:
    """The root messages of one episode of a group, per channel: stored after each
    channel's post, so a retried delivery updates the root it posted instead of posting
    another."""

    episode: int = -1
    posts: Mapping[str, tuple[MessageRef, ...]] = field(default_factory=dict)

    def of(self, episode: int) -> dict[str, tuple[MessageRef, ...]]:
        """The roots of ``episode`` per channel; none when those stored are another's."""
        return dict(self.posts) if self.episode == episode else {}

    def refs(self) -> list[MessageRef]:
        """Every root stored, in every channel."""
        return [ref for refs in self.posts.values() for ref in refs]

    def json(self) -> dict[str, Any]:
        return {
            "episode": self.episode,
            "posts": {ch: [asdict(ref) for ref in refs] for ch, refs in self.posts.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Roots:
        stored = data or {}
        return cls(
            episode=int(stored.get("episode", -1)),
            posts={
                str(channel): tuple(MessageRef(**ref) for ref in refs)
                for channel, refs in (stored.get("posts") or {}).items()
            },
        )


@dataclass(frozen=True)
class AlertGroup:
    """One alert group (Alertmanager's groupKey per receiver, or one detector or one
    housekeeping notice on one queue): what is firing, and where its chat thread is."""

    id: int
    key_hash: str
    source: str
    receiver: str
    group_key: str
    alertname: str
    queue: str | None
    route: Destination
    labels: dict[str, str]
    annotations: dict[str, str]
    links: dict[str, str]
    status: Status
    alerts: dict[str, AlertRecord]
    episode: int
    opened_at: datetime
    changed_at: datetime
    resolved_at: datetime | None
    notifications: int
    truncated: int  # alerts Alertmanager's max_alerts left out of the latest notification
    roots: Roots

    @property
    def firing(self) -> list[AlertRecord]:
        return [a for a in self.alerts.values() if a.status == "firing"]

    @property
    def started_at(self) -> datetime | None:
        """The earliest ``startsAt`` of its alerts (an incident's fault time)."""
        return min((a.starts_at for a in self.alerts.values() if a.starts_at), default=None)


@dataclass(frozen=True)
class SetAside:
    """The stored notifications set aside: how many, and the oldest of them."""

    count: int
    oldest_id: int | None = None
    oldest_at: datetime | None = None
    oldest_error: str | None = None


# -- the posts of a group's thread -------------------------------------------------------


@dataclass(frozen=True)
class PostRoot:
    """The group's root message for its episode: posted once per channel."""

    group: int
    episode: int | None  # None: the group's episode when delivered
    kind: ClassVar[str] = "root"

    def to_payload(self) -> dict[str, Any]:
        return {"action": self.kind, "episode": self.episode, "group": self.group}


@dataclass(frozen=True)
class PostUpdate:
    """The root messages of the episode brought up to date (the group as it is when
    delivered)."""

    group: int
    episode: int | None
    kind: ClassVar[str] = "update"

    def to_payload(self) -> dict[str, Any]:
        return {"action": self.kind, "group": self.group, "episode": self.episode}


@dataclass(frozen=True)
class PostReply:
    """A message in the episode's thread. ``turn``: the group fired again or resolved as
    a whole (such a reply always goes out; other news a newer one supersedes)."""

    group: int
    episode: int | None
    message: Message
    turn: bool = False
    kind: ClassVar[str] = "reply"

    def to_payload(self) -> dict[str, Any]:
        return {
            "action": self.kind,
            "group": self.group,
            "episode": self.episode,
            "message": message_json(self.message),
            "turn": self.turn,
        }


@dataclass(frozen=True)
class PostTriage:
    """The queue's triage, read when delivered, in the episode's thread."""

    group: int
    episode: int | None
    kind: ClassVar[str] = "triage"

    def to_payload(self) -> dict[str, Any]:
        return {"action": self.kind, "episode": self.episode, "group": self.group}


AlertPost = PostRoot | PostUpdate | PostReply | PostTriage


def post_from_payload(payload: Mapping[str, Any]) -> AlertPost:
    """The post an outbox item holds, whichever version queued it. Raises ``ValueError``
    for an action no version wrote."""
    action = str(payload["action"])
    group = int(payload["group"])
    raw = payload.get("episode")
    episode = None if raw is None else int(raw)
    if action == PostRoot.kind:
        return PostRoot(group, episode)
    if action == PostUpdate.kind:
        return PostUpdate(group, episode)
    if action == PostReply.kind:
        message = message_from_json(dict(payload["message"]))
        return PostReply(group, episode, message, turn=bool(payload.get("turn")))
    if action == PostTriage.kind:
        return PostTriage(group, episode)
    raise ValueError(f"unknown alert post {action!r}")


def distinct_labels(record: AlertRecord, common: Mapping[str, str]) -> dict[str, str]:
    """The labels that tell this alert from the others of its group."""
    return {k: v for k, v in sorted(record.labels.items()) if common.get(k) != v}
