"""Telling an audience: a communication is met when its message is posted to a channel
people read, not when it is queued. ``/incident notify`` queues the message with what
telling needs (``told``), and the outbox, once a platform took the post, has the desk
record that the audience was told (``meet``, ``event``).
Every function that takes a connection runs inside its caller's transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.incidents import obligations
from services.incidents.messages import duration
from services.incidents.model import IncidentView
from services.message import Message, Text
from services.notify import MessageRef


def told(obligation: int, audience: str, actor: Actor, text: str) -> dict[str, Any]:
    """What an audience's queued post carries for its telling to be recorded."""
    return {
        "obligation": obligation,
        "audience": audience,
        "sender": {"person": actor.person, "platform": actor.platform, "account": actor.account},
        "text": text,
    }


@dataclass(frozen=True)
class Told:
    incident: int
    obligation: int
    audience: str
    actor: Actor
    text: str
    channels: tuple[str, ...]

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> Told:
        sender = payload.get("sender") or {}
        return cls(
            incident=int(payload["incident"]),
            obligation=int(payload["obligation"]),
            audience=str(payload["audience"]),
            actor=Actor(
                sender.get("person"), str(sender.get("platform")), str(sender.get("account"))
            ),
            text=str(payload.get("text") or ""),
            channels=tuple(str(c) for c in payload.get("channels") or ()),
        )

    @property
    def who(self) -> str:
        return self.actor.person or f"{self.actor.platform}:{self.actor.account}"

    def said(self, refs: Sequence[MessageRef], latency: timedelta, late: bool) -> str:
        return (
            f"{self.who} told the {self.audience} (delivered to {_where(refs)}) "
            f"{duration(latency)} after the declaration" + (" — after its deadline" if late else "")
        )

    def nowhere(self) -> str:
        return (
            f"the message {self.who} sent for the {self.audience} reached no channel: no chat "
            f"platform queuebot posts to carries {', '.join(self.channels) or 'their channels'}"
            f"; nobody was told and their communication stays pending"
        )

    def nowhere_message(self, view: IncidentView) -> Message:
        return Message(
            summary=f"{view.name}: the {self.audience} were not told",
            blocks=(Text(f"⚠️ {self.nowhere()}."),),
        )


async def meet(
    conn: AsyncConnection, told: Told, view: IncidentView, now: datetime
) -> tuple[bool, timedelta]:
    """Mark the communication met at ``now`` (missed and told late where its deadline
    passed); whether late, and the latency from the declaration. Told again, the first
    post's time stands."""
    state, met_at = await obligations.lock_obligation(conn, told.obligation)
    due = view.obligations[[o.id for o in view.obligations].index(told.obligation)].due_at
    late = state == "missed" or (met_at is None and now > due)
    if met_at is None:
        by = told.actor.person or told.actor.account
        await obligations.met(conn, told.obligation, late=late, at=now, by=by)
    return late, now - view.declared_at


def event(  # noqa: PLR0917 - one call site, every value named there
    told: Told,
    view: IncidentView,
    refs: Sequence[MessageRef],
    latency: timedelta,
    late: bool,
    now: datetime,
) -> dict[str, Any]:
    """The ``incident.notified`` audit event of a telling (``AuditTrail.append``'s
    arguments)."""
    return {
        "action": "incident.notified",
        "actor": told.actor,
        "at": now,
        "subject": view.name,
        "queue": view.queue,
        "incident": view.name,
        "details": {
            "audience": told.audience,
            "channels": list(told.channels),
            "delivered_to": [f"{r.platform}:{r.channel}" for r in refs],
            "latency_ms": int(latency.total_seconds() * 1000),
            "late": late,
            "text": told.text,
        },
    }


def _where(refs: Sequence[MessageRef]) -> str:
    return ", ".join(dict.fromkeys(f"{r.platform} {r.channel}" for r in refs))
