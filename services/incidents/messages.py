"""What an incident's thread and its audiences' channels say; and what a request to
resolve one without its validation says."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from services import button_ids
from services.audit import Actor
from services.changes.model import ChangeView, Executed
from services.changes.words import KindWords
from services.config import ApprovalConfig
from services.incidents.authority import Held, called
from services.incidents.model import IncidentView, ObligationView, Override, number_text
from services.message import Actions, Block, Button, Fields, Heading, Mention, Message, Table, Text
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
            + " → ".join(f"{n + 1} {s.name}" for n, s in enumerate(view.restore()))
            + f"\n(/incident step N done --incident {view.name}, in this order)"
            if view.restore()
            else "Restore order: none"
        ),
        *_holding(view),
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


def _holding(view: IncidentView) -> tuple[Block, ...]:
    """What the checklist says of redrives, where its runbook holds them."""
    holding = view.holding_step()
    if holding is None:
        return ()
    number, step = holding
    return (
        Text(
            f"Redrives {on_queue(view)} are held until step {number} ({step.name}) is done: "
            f"/incident step {number} done --incident {view.name} once it is restored"
        ),
    )


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


def reminder(
    view: IncidentView,
    obligation: ObligationView,
    now: datetime,
    draft: bool,
    lead: Mention | None = None,
) -> Message:
    """To the lead (``lead``: called by their mention), in the thread."""
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
    return Message(
        summary=f"{view.name}: tell the {obligation.audience}",
        blocks=tuple(blocks),
        mentions=called(lead),
    )


def escalation(
    view: IncidentView,
    obligation: ObligationView,
    authority: str,
    held: Held,
    lead: Mention | None = None,
) -> Message:
    """To the declaration authority: the lead and the authority's secondary called by
    their mentions (a schedule's next one on shift, a group rota's group)."""
    who = f"{authority} ({', '.join(held.names)})" if held.names else authority
    secondary = f" Secondary: {held.secondary_words}." if held.secondary_words else ""
    return Message(
        summary=f"{view.name}: the {obligation.audience} were not told in time",
        blocks=(
            Heading(f"🔺 {view.name}: communication to the {obligation.audience} missed"),
            Text(
                f"{who}: the runbook asks that the {obligation.audience} be told within "
                f"{duration(obligation.within)} of the declaration "
                f"({obligation.due_at:%H:%M:%S} UTC). "
                f"Nobody has. Lead: {view.lead or '-'}.{secondary} Incident: {view.summary}"
            ),
        ),
        mentions=called(lead, held.secondary),
    )


def lead_changed(view: IncidentView, said: str, lead: Mention | None) -> Message:
    """In the thread: who leads now (called by their mention)."""
    return Message(
        summary=f"{view.name}: {said}",
        blocks=(Text(f"🧭 {said}. They lead {view.name} now: reminders go to them."),),
        mentions=called(lead),
    )


def on_queue(view: IncidentView) -> str:
    """Where the incident holds redrives: its queue, or every queue where it names none."""
    return f"on {view.queue}" if view.queue else "on every queue"


def skipped(override: Override) -> str:
    """The validation items an override resolved without, by number: "v2, v3"."""
    return ", ".join(item.split(" ", 1)[0] for item in override.unvalidated) or "none"


def _since(view: IncidentView) -> tuple[datetime, str]:
    """What an incident's times count from: the fault where it is known, else the
    declaration."""
    if view.fault_at is not None:
        return view.fault_at, "the fault"
    return view.declared_at, "the declaration"


def resolution_said(
    view: IncidentView,
    by: str,
    now: datetime,
    validated: datetime | None,
    override: Override | None,
) -> str:
    """The timeline's line of the resolution: who resolved it (on an override, who asked
    and who approved), when, and when it recovered where that was measured."""
    since, what = _since(view)
    lasted = f"{duration(now - since)} after {what}"
    if override is not None:
        return (
            f"resolved on {override.request}, requested by {override.requester} "
            f"({override.reason}) and approved by {', '.join(override.approvers)}, {lasted}, "
            f"without validating {skipped(override)}: recovery not measured"
        )
    said = f"{by} resolved it, {lasted}"
    if validated is not None:
        said += f"; recovered (validated) {duration(validated - since)} after {what}"
    return said


def resolved(
    view: IncidentView,
    by: str,
    now: datetime,
    validated: datetime | None,
    override: Override | None,
) -> Message:
    """The thread's post when the incident is resolved."""
    since, what = _since(view)
    if override is not None:
        text = (
            f"✅ {view.name} resolved on {override.request}, requested by {override.requester} "
            f"and approved by {', '.join(override.approvers)}, {duration(now - since)} after "
            f"{what}, without validating {skipped(override)}: recovery not measured."
        )
    elif validated is not None:
        text = (
            f"✅ {view.name} resolved by {by}; recovered {duration(validated - since)} after "
            f"{what} (validated at {validated:%H:%M:%S} UTC)."
        )
    else:
        text = f"✅ {view.name} resolved by {by}, {duration(now - since)} after {what}."
    return Message(summary=f"{view.name} resolved", blocks=(Text(text),))


class OverrideWords(KindWords):
    """A request to resolve an incident without the validation items not done."""

    selection = False
    checks_title = "Validation items resolved without (they stay on the record as overridden)"
    overrides = False

    def headline(self, v: ChangeView) -> str:
        return f"resolve {v.incident} without {len(v.checks)} validation item(s)"

    def outcome(self, v: ChangeView, result: Executed) -> str:
        return (
            f"{v.incident} resolved, requested by {v.requester} and approved by "
            f"{', '.join(v.approvals)}; /incident export {v.incident} writes the postmortem"
        )

    def quorum_what(self, kind: str, rows: int, judged: int, approval: ApprovalConfig) -> str:
        return kind
