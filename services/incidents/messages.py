"""What an incident's thread and its audiences' channels say."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from services import button_ids
from services.audit import Actor
from services.incidents.model import IncidentView, ObligationView, number_text
from services.message import Actions, Block, Button, Fields, Heading, Message, Table, Text
from services.runbooks import Runbook


def duration(span: timedelta) -> str:
    seconds = max(0, int(span.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _who(actor: Actor) -> str:
    return actor.person or f"{actor.platform}:{actor.account}"


def checklist(view: IncidentView, runbook: Runbook, holders: Sequence[str]) -> Message:
    """Posted when the incident is declared: its clocks and what the runbook asks."""
    facts: list[tuple[str, str]] = [
        ("Scenario", f"{view.scenario} ({runbook.title})"),
        ("Lead", view.lead or "-"),
        ("Declared", f"{view.declared_at:%H:%M:%S} UTC"),
        (
            "Fault",
            f"{view.fault_at:%H:%M:%S} UTC (from the alert)" if view.fault_at else "not known",
        ),
    ]
    if view.queue:
        facts.append(("Queue", view.queue))
    statement = runbook.statement
    blocks: list[Block] = [
        Heading(f"🚨 {view.name} declared: {view.summary}"),
        Fields(tuple(facts)),
        Text("Assumed healthy: " + (", ".join(statement.assumes) or "nothing")),
        Table(
            ("audience", "within", "due", "over"),
            tuple(
                (o.audience, duration(o.within), f"{o.due_at:%H:%M:%S} UTC", o.channel_dependency)
                for o in view.obligations
            ),
            title="Communications (/incident notify AUDIENCE)",
        ),
        Text(
            "Restore order: "
            + " → ".join(s.name for s in view.restore())
            + f"\n(/incident step STEP done --incident {view.name}, in this order)"
            if view.restore()
            else "Restore order: none"
        ),
        Text("Validation:\n" + "\n".join(f"☐ {s.name}" for s in view.validation())),
        Text(
            f"Declaration authority: {runbook.declaration_role}"
            + (f" ({', '.join(holders)})" if holders else "")
        ),
    ]
    drafts = [
        Button(
            button_ids.draft(view.number, o.audience),
            f"Send draft to {o.audience}",
            command=f"/incident notify {o.audience} --incident {view.name}",
        )
        for o in view.obligations
        if any(c.audience == o.audience and c.draft for c in runbook.communications)
    ]
    if drafts:
        blocks.append(Actions(tuple(drafts[:5])))
    return Message(summary=f"{view.name} declared: {view.summary}", blocks=tuple(blocks))


def linked(number: int, actor: Actor, summary: str) -> Message:
    return Message(
        summary=f"{number_text(number)}: declared again",
        blocks=(
            Text(f"{_who(actor)} declared this scenario again ({summary}); it is this incident."),
        ),
    )


def to_audience(view: IncidentView, audience: str, text: str, actor: Actor) -> Message:
    said = text if text.startswith(f"{view.name}:") else f"{view.name}: {text}"
    return Message(
        summary=said[:160],
        blocks=(
            Heading(f"{view.name}: {view.summary}"),
            Text(text),
            Text(f"— {_who(actor)}, for the {audience}"),
        ),
    )


def notified(
    view: IncidentView, audience: str, actor: Actor, latency: timedelta, late: bool
) -> Message:
    mark = "⚠️" if late else "✅"
    when = "after its deadline" if late else "within its window"
    return Message(
        summary=f"{view.name}: {audience} told",
        blocks=(
            Text(
                f"{mark} {_who(actor)} told the {audience} {duration(latency)} after "
                f"declaration, {when}."
            ),
        ),
    )


def reminder(view: IncidentView, obligation: ObligationView, now: datetime, draft: bool) -> Message:
    left = obligation.due_at - now
    how = (
        f"/incident notify {obligation.audience} --incident {view.name} sends the runbook's draft"
        if draft
        else f'/incident notify {obligation.audience} "..." --incident {view.name}'
    )
    blocks: list[Block] = [
        Text(
            f"⏰ {view.lead or 'Lead'}: the {obligation.audience} must be told by "
            f"{obligation.due_at:%H:%M:%S} UTC ({duration(left)} left). {how}"
        )
    ]
    if draft:
        blocks.append(
            Actions(
                (
                    Button(
                        button_ids.draft(view.number, obligation.audience),
                        f"Send draft to {obligation.audience}",
                        command=f"/incident notify {obligation.audience} --incident {view.name}",
                    ),
                )
            )
        )
    return Message(summary=f"{view.name}: tell the {obligation.audience}", blocks=tuple(blocks))


def escalation(
    view: IncidentView, obligation: ObligationView, authority: str, holders: Sequence[str]
) -> Message:
    who = f"{authority} ({', '.join(holders)})" if holders else authority
    return Message(
        summary=f"{view.name}: the {obligation.audience} were not told in time",
        blocks=(
            Heading(f"🔺 {view.name}: communication to the {obligation.audience} missed"),
            Text(
                f"{who}: the runbook asks that the {obligation.audience} be told within "
                f"{duration(obligation.within)} of the declaration "
                f"({obligation.due_at:%H:%M:%S} UTC). "
                f"Nobody has. Lead: {view.lead or '-'}. Incident: {view.summary}"
            ),
        ),
    )


def resolved(view: IncidentView, actor: Actor, lasted: timedelta) -> Message:
    since = "the fault" if view.fault_at else "the declaration"
    return Message(
        summary=f"{view.name} resolved",
        blocks=(
            Text(f"✅ {view.name} resolved by {_who(actor)}, {duration(lasted)} after {since}."),
        ),
    )
