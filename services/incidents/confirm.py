"""Confirming a validation item by hand: allowed where queuebot has not measured it
failing. An item whose newest measurement failed is not confirmed by one person's word;
resolving without it is the override another person approves."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import MeasuredFailing
from services.incidents import timeline
from services.incidents.model import IncidentView, StepView

MEASURED_BY = "queuebot"  # the done_by of an item queuebot measured as passing


async def refuse_if_measured_failing(
    conn: AsyncConnection, view: IncidentView, target: StepView
) -> None:
    """Refuse confirming ``target`` by hand when queuebot's newest measurement of it
    failed."""
    if target.kind != "validation":
        return
    item = next(i + 1 for i, s in enumerate(view.validation()) if s.position == target.position)
    said = await timeline.newest_failure(conn, view.number, item)
    if said is None:
        return
    raise MeasuredFailing(
        f"{view.name}: queuebot measured v{item} failing ({said}); confirming it by hand "
        f"is an override another person approves: /incident resolve {view.name} --override "
        f'--reason "WHY". /incident validate {view.name} measures it again.'
    )


def how_validated(step: StepView) -> str:
    """For the postmortem: who said a validation item holds, and how."""
    if step.state == "overridden":
        return f"overridden, approved by {step.done_by}" if step.done_by else "overridden"
    if step.state != "done":
        return "not validated"
    if step.done_by == MEASURED_BY:
        return "measured by queuebot"
    return f"confirmed by hand by {step.done_by}" if step.done_by else "confirmed by hand"
