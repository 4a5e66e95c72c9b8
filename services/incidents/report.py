"""An incident as a person reads it: its status (communications, restore steps,
validation) and its timeline."""

from __future__ import annotations

from services.incidents.messages import duration
from services.incidents.model import IncidentView, Lead
from services.message import Block, Fields, Heading, Message, Table


def status_message(view: IncidentView) -> Message:
    facts = [
        ("State", view.state),
        ("Scenario", view.scenario),
        ("Lead", _lead(view)),
        ("Declared", f"{view.declared_at:%Y-%m-%d %H:%M:%S} UTC"),
        ("Fault", f"{view.fault_at:%H:%M:%S} UTC" if view.fault_at else "not known"),
    ]
    if view.queue:
        facts.append(("Queue", view.queue))
    held = redrives(view)
    if held is not None:
        facts.append(("Redrives", held))
    blocks: list[Block] = [Heading(f"{view.name}: {view.summary}"), Fields(tuple(facts))]
    blocks.append(
        Table(
            ("audience", "due", "state", "told after"),
            tuple(
                (
                    o.audience,
                    f"{o.due_at:%H:%M:%S} UTC",
                    o.state,
                    duration(o.latency) if o.latency is not None else "-",
                )
                for o in view.obligations
            ),
            title="Communications",
        )
    )
    if view.restore():
        blocks.append(
            Table(
                ("step", "restore", "state"),
                tuple(
                    (str(i + 1), s.name, _done(s.state, s.done_by))
                    for i, s in enumerate(view.restore())
                ),
                title="Restore order",
            )
        )
    blocks.append(
        Table(
            ("step", "validation", "state", "seen"),
            tuple(
                (f"v{i + 1}", s.name, _done(s.state, s.done_by), s.result or "-")
                for i, s in enumerate(view.validation())
            ),
            title="Validation (/incident step vN done)",
        )
    )
    return Message(summary=f"{view.name}: {view.state}", blocks=tuple(blocks))


def redrives(view: IncidentView) -> str | None:
    """Whether the incident holds redrives on its queue, and until what; None where its
    runbook holds none."""
    holding = view.holding_step()
    if holding is None:
        return None
    number, step = holding
    if view.blocks_redrive and view.state == "open":
        return f"held until step {number} ({step.name}) is done"
    if step.state == "done":
        return f"may run again (step {number}, {step.name}, is done)"
    return "not held: the incident is resolved"


def _lead(view: IncidentView) -> str:
    """Who leads it, and since when where the lead was handed over."""
    handoffs = [e for e in view.timeline if e.kind == "lead"]
    lead = Lead.of(view).shown()
    if not handoffs:
        return lead
    return f"{lead} (since {max(e.at for e in handoffs):%H:%M:%S} UTC)"


def _done(state: str, by: str | None) -> str:
    return f"{state} ({by})" if state in ("done", "overridden") and by else state


def timeline_message(view: IncidentView) -> Message:
    rows = tuple(
        (f"{e.at:%H:%M:%S}", e.kind, e.text) for e in sorted(view.timeline, key=lambda e: e.at)
    )
    return Message(
        summary=f"{view.name}: {len(rows)} entries",
        blocks=(Heading(f"Timeline of {view.name}"), Table(("UTC", "what", "detail"), rows)),
    )
