"""The ids of queuebot's buttons, written and read back here and nowhere else.

A button's id carries what it asks, so a click on a message posted long ago, by a process
long gone, still says what to do; every id ever posted must stay readable, byte for byte:

- ``cr:approve:N``, ``cr:reject:N``: a decision on change request N
- ``q:triage:QUEUE``, ``q:failed:QUEUE``: an alert thread's reads of its queue
- ``inc:declare:N``: declare an incident from alert group N (on Slack and Discord, its
  form opens filled with the alert's scenario, summary and queue)
- ``inc:draft:N:AUDIENCE``: send incident N's draft to an audience

Each kind is a typed record whose ``id`` writes it; ``parse`` reads an id back into its
record, or None when it names nothing queuebot can act on (``cr:approve:0``, an unknown
verb). The patterns are the ones Discord's persistent buttons are registered with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# Every button queuebot draws starts so (whether its id then parses or not)
DRAWN = re.compile(r"^(cr|q|inc):")
CHANGE = re.compile(r"cr:(?P<verb>approve|reject):(?P<id>[0-9]{1,12})")
QUEUE = re.compile(r"q:(?P<verb>triage|failed):(?P<queue>[a-z][a-z0-9_-]{0,31})")
INCIDENT = re.compile(
    r"inc:(?P<verb>declare|draft):(?P<id>[0-9]{1,12})(?::(?P<audience>[a-z][a-z0-9_-]{0,63}))?"
)


@dataclass(frozen=True)
class ChangeDecision:
    """``cr:approve:N`` or ``cr:reject:N``."""

    verb: Literal["approve", "reject"]
    request: int

    @property
    def id(self) -> str:
        return f"cr:{self.verb}:{self.request}"


@dataclass(frozen=True)
class QueueRead:
    """``q:triage:QUEUE`` (the full triage) or ``q:failed:QUEUE`` (its failed rows)."""

    verb: Literal["triage", "failed"]
    queue: str

    @property
    def id(self) -> str:
        return f"q:{self.verb}:{self.queue}"


@dataclass(frozen=True)
class IncidentDeclaration:
    """``inc:declare:N``: an alert thread's Declare incident, for alert group N."""

    alert_group: int

    @property
    def id(self) -> str:
        return f"inc:declare:{self.alert_group}"


@dataclass(frozen=True)
class DraftSending:
    """``inc:draft:N:AUDIENCE``: incident N's Send draft to one audience."""

    incident: int
    audience: str

    @property
    def id(self) -> str:
        return f"inc:draft:{self.incident}:{self.audience}"


Pressed = ChangeDecision | QueueRead | IncidentDeclaration | DraftSending


def approve(request: int) -> str:
    return ChangeDecision("approve", request).id


def reject(request: int) -> str:
    return ChangeDecision("reject", request).id


def triage(queue: str) -> str:
    return QueueRead("triage", queue).id


def failed(queue: str) -> str:
    return QueueRead("failed", queue).id


def declare(alert_group: int) -> str:
    return IncidentDeclaration(alert_group).id


def draft(incident: int, audience: str) -> str:
    return DraftSending(incident, audience).id


def parse(button_id: str) -> Pressed | None:
    """The record a button's id stands for, or None when it names nothing queuebot can
    act on: no kind's pattern, a request, group or incident numbered 0, a declaration
    with an audience or a draft without one."""
    change = CHANGE.fullmatch(button_id)
    if change is not None:
        number = int(change["id"])
        if number < 1:
            return None
        return ChangeDecision("approve" if change["verb"] == "approve" else "reject", number)
    read = QUEUE.fullmatch(button_id)
    if read is not None:
        return QueueRead("triage" if read["verb"] == "triage" else "failed", read["queue"])
    incident = INCIDENT.fullmatch(button_id)
    if incident is None or int(incident["id"]) < 1:
        return None
    number, audience = int(incident["id"]), incident["audience"]
    if incident["verb"] == "declare" and audience is None:
        return IncidentDeclaration(number)
    if incident["verb"] == "draft" and audience is not None:
        return DraftSending(number, audience)
    return None
