"""What a click asks: the command each of queuebot's buttons stands for (their ids are
written and parsed in services/button_ids.py), and the words that name it to the person."""

from __future__ import annotations

from commands.model import Approve, Command, Declare, Dlq, Notify, Reject, Triage
from services.button_ids import (
    ChangeDecision,
    DraftSending,
    IncidentDeclaration,
    Pressed,
    QueueRead,
    parse,
)


def command_for(pressed: Pressed) -> Command:
    """The command a parsed button stands for: every kind names exactly one."""
    match pressed:
        case ChangeDecision(verb="approve", request=number):
            return Approve(request=number)
        case ChangeDecision(request=number):
            return Reject(request=number)
        case QueueRead(verb="triage", queue=queue):
            return Triage(queue=queue)
        case QueueRead(queue=queue):
            return Dlq(queue=queue)
        case IncidentDeclaration(alert_group=group):
            return Declare(alert_group=group)
        case DraftSending(incident=number, audience=audience):
            return Notify(audience=audience, incident=str(number))


def command_of(button_id: str) -> Command | None:
    """The command a button's id stands for, or None when it names nothing queuebot can
    act on (``cr:approve:0``, an unknown verb)."""
    pressed = parse(button_id)
    return None if pressed is None else command_for(pressed)


def words(button_id: str) -> str:
    """The click, in the person's words, for an answer given after a restart."""
    pressed = parse(button_id)
    if isinstance(pressed, ChangeDecision):
        done = "approval" if pressed.verb == "approve" else "rejection"
        return f"your {done} of CR-{pressed.request}"
    return f"your click on {button_id}"
