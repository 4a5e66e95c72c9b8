"""For the postmortem: what housekeeping changed on the incident's queue while the
incident was open, read from the audit trail (its ``housekeeping.changed`` events).
Housekeeping's changes are not change requests: they are its own bounded automatic
changes, each audited with the rows it touched."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import AuditEvent
from services.estate.profile import as_utc
from services.incidents.model import IncidentView
from services.jsonable import loads

EVENTS = cast(sa.Table, AuditEvent.__table__)
CHANGED = "housekeeping.changed"
SHOWN_IDS = 20  # row ids listed per change; the audit trail holds them all


@dataclass(frozen=True)
class UpkeepChange:
    at: datetime
    queue: str | None
    part: str
    what: str
    ids: tuple[str, ...]


async def during(conn: AsyncConnection, view: IncidentView) -> list[UpkeepChange]:
    """Housekeeping's changes on the incident's queue (every queue where it names none)
    from its fault (its declaration where the fault time is not known) until it was
    resolved (until now while it is open), in the order they were made."""
    since = view.fault_at or view.declared_at
    query = sa.select(EVENTS.c.occurred_at, EVENTS.c.queue, EVENTS.c.details).where(
        EVENTS.c.action == CHANGED, EVENTS.c.occurred_at >= since
    )
    if view.resolved_at is not None:
        query = query.where(EVENTS.c.occurred_at <= view.resolved_at)
    if view.queue is not None:
        query = query.where(EVENTS.c.queue == view.queue)
    found: list[UpkeepChange] = []
    for at, queue, details in await conn.execute(query.order_by(EVENTS.c.id)):
        said = loads(details)
        said = said if isinstance(said, dict) else {}
        when = as_utc(at)
        assert when is not None
        found.append(
            UpkeepChange(
                at=when,
                queue=queue,
                part=str(said.get("part") or "-"),
                what=str(said.get("what") or "-"),
                ids=tuple(str(i) for i in said.get("ids") or ()),
            )
        )
    return found


def lines(view: IncidentView, changes: list[UpkeepChange]) -> list[str]:
    """The postmortem's part on housekeeping: a table of its changes, or that it made
    none."""
    where = view.queue or "any queue"
    if not changes:
        return [f"Housekeeping changed no row of {where} during {view.name}."]
    rows = sum(len(c.ids) for c in changes)
    found = [
        f"Housekeeping changed {rows} row(s) of {where} during {view.name} (its own bounded "
        "automatic changes, audited as housekeeping.changed events; not change requests):",
        "",
        "| UTC | part | what | rows | ids |"
        if view.queue
        else "| UTC | queue | part | what | rows | ids |",
        "|---|---|---|---|---|" if view.queue else "|---|---|---|---|---|---|",
    ]
    for c in changes:
        shown = ", ".join(c.ids[:SHOWN_IDS]) + (
            f" and {len(c.ids) - SHOWN_IDS} more" if len(c.ids) > SHOWN_IDS else ""
        )
        queue = "" if view.queue else f" {c.queue or '-'} |"
        found.append(
            f"| {c.at:%Y-%m-%d %H:%M:%S} UTC |{queue} {c.part} | {c.what} | {len(c.ids)} "
            f"| {shown} |"
        )
    return found
