"""Confirming a validation item by hand: allowed where queuebot has not measured it
failing. An item whose newest measurement failed is not confirmed by one person's word;
resolving without it is the override another person approves."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import MeasuredFailing
from services.incidents.model import IncidentView, StepView
from services.incidents.timeline import TIMELINE

MEASURED_BY = "queuebot"  # the done_by of an item queuebot measured as passing


async def newest_failure(conn: AsyncConnection, number: int, item: int) -> str | None:
    """What the newest measurement of validation item ``v{item}`` said, when it failed
    (``/incident validate`` writes each on the timeline as ``vN STATE: WHAT``)."""
    prefix = f"v{item} "
    found = (
        await conn.execute(
            sa.select(TIMELINE.c.text)
            .where(
                TIMELINE.c.incident_id == number,
                TIMELINE.c.kind == "validation",
                TIMELINE.c.text.startswith(prefix, autoescape=True),
            )
            .order_by(TIMELINE.c.at.desc(), TIMELINE.c.id.desc())
            .limit(1)
        )
    ).scalar_one_or_none()
    failed = f"{prefix}failed: "
    return found[len(failed) :] if found and found.startswith(failed) else None


async def refuse_if_measured_failing(
    conn: AsyncConnection, view: IncidentView, target: StepView
) -> None:
    """Refuse confirming ``target`` by hand when queuebot's newest measurement of it
    failed."""
    if target.kind != "validation":
        return
    item = next(i + 1 for i, s in enumerate(view.validation()) if s.position == target.position)
    said = await newest_failure(conn, view.number, item)
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
