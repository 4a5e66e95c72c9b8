"""What a button's custom_id asks, read back out of the id itself (the ids queuebot
draws on every platform): ``cr:approve:17``, ``cr:reject:17``, an alert thread's
``q:triage:QUEUE`` and ``q:failed:QUEUE``, ``inc:declare:GROUP`` and an incident's
``inc:draft:INCIDENT:AUDIENCE``."""

from __future__ import annotations

import re

from commands.model import Approve, Command, Declare, Dlq, Notify, Reject, Triage

CHANGE = r"cr:(?P<verb>approve|reject):(?P<id>[0-9]{1,12})"
READ = r"q:(?P<verb>triage|failed):(?P<queue>[a-z][a-z0-9_-]{0,31})"
INCIDENT = (
    r"inc:(?P<verb>declare|draft):(?P<id>[0-9]{1,12})(?::(?P<audience>[a-z][a-z0-9_-]{0,63}))?"
)
OURS = re.compile(r"^(cr|q|inc):")  # every button queuebot draws


def decision(custom_id: str) -> Command | None:
    """The command a button stands for, or None when it names nothing queuebot can act on
    (``cr:approve:0``, an unknown verb)."""
    change = re.fullmatch(CHANGE, custom_id)
    if change is not None:
        number = int(change["id"])
        if number < 1:
            return None
        return Approve(request=number) if change["verb"] == "approve" else Reject(request=number)
    read = re.fullmatch(READ, custom_id)
    if read is not None:
        queue = read["queue"]
        return Triage(queue=queue) if read["verb"] == "triage" else Dlq(queue=queue)
    incident = re.fullmatch(INCIDENT, custom_id)
    if incident is not None and int(incident["id"]) >= 1:
        number, audience = int(incident["id"]), incident["audience"]
        if incident["verb"] == "declare" and audience is None:
            return Declare(alert_group=number)
        if incident["verb"] == "draft" and audience is not None:
            return Notify(audience=audience, incident=str(number))
    return None
