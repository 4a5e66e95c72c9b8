"""An incident's timeline: the lines written on it, the change requests made under it
(``--incident INC-N``, or a request about a plan made under it) and what happened to its
plans (``plan_events``), as lines of their own. Every function takes the caller's
connection and runs inside its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import Approval, ChangeRequest, IncidentEvent
from services.estate.profile import as_utc
from services.incidents import plan_events
from services.incidents.model import Note, TimelineEntry, number_text

TIMELINE = cast(sa.Table, IncidentEvent.__table__)
REQUESTS = cast(sa.Table, ChangeRequest.__table__)
APPROVALS = cast(sa.Table, Approval.__table__)


async def note(
    conn: AsyncConnection, number: int, *, at: datetime, kind: str, text: str, actor: str | None
) -> None:
    """One line on the incident's timeline."""
    await conn.execute(
        TIMELINE.insert().values(incident_id=number, at=at, kind=kind, actor=actor, text=text)
    )


async def note_many(conn: AsyncConnection, notes: Sequence[Note]) -> None:
    """Lines on incidents' timelines, in one statement, in the order given."""
    if notes:
        await conn.execute(
            TIMELINE.insert(),
            [
                {
                    "incident_id": n.incident,
                    "at": n.at,
                    "kind": n.kind,
                    "actor": n.actor,
                    "text": n.text,
                }
                for n in notes
            ],
        )


async def entries(conn: AsyncConnection, number: int) -> list[TimelineEntry]:
    """The incident's lines in time order, then the lines of its change requests, then
    those of its plans (each in time order: a reader sorts them together by time, and
    at one instant a request's lines come before what it did to its plan)."""
    found = await conn.execute(
        sa.select(TIMELINE)
        .where(TIMELINE.c.incident_id == number)
        .order_by(TIMELINE.c.at, TIMELINE.c.id)
    )
    own = [
        TimelineEntry(_utc(t["at"]), str(t["kind"]), t["actor"], str(t["text"]))
        for t in found.mappings()
    ]
    name = number_text(number)
    return own + await _changes(conn, name) + await plan_events.entries(conn, name)


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


async def _changes(conn: AsyncConnection, name: str) -> list[TimelineEntry]:
    """The change requests made under the incident (``--incident INC-N``): requested,
    approved or rejected, and how they ended."""
    entries: list[TimelineEntry] = []
    requests = (
        (
            await conn.execute(
                sa.select(REQUESTS).where(REQUESTS.c.incident == name).order_by(REQUESTS.c.id)
            )
        )
        .mappings()
        .all()
    )
    for request in requests:
        label = _label(request)
        entries.append(
            TimelineEntry(
                _utc(request["requested_at"]),
                "change.requested",
                request["requester_person"],
                f"{request['requester_person']} requested {label}: {request['reason']}",
            )
        )
        decisions = (
            await conn.execute(
                sa.select(APPROVALS.c.person, APPROVALS.c.decision, APPROVALS.c.at).where(
                    APPROVALS.c.request_id == request["id"]
                )
            )
        ).all()
        for person, decision, at in decisions:
            entries.append(
                TimelineEntry(
                    _utc(at), f"change.{decision}", person, f"{person} {decision}d {label}"
                )
            )
        if request["state"] not in ("pending", "approved") and request["decided_at"] is not None:
            entries.append(
                TimelineEntry(
                    _utc(request["decided_at"]),
                    f"change.{request['state']}",
                    None,
                    f"CR-{request['id']} {request['state']}",
                )
            )
    return entries


def _label(request: sa.RowMapping) -> str:
    """How the timeline names a request: its number and what it does."""
    number, kind = f"CR-{request['id']}", str(request["kind"])
    if kind == "resolve":
        return f"{number} (resolve without every validation item)"
    plan = (request["selector"] or {}).get("plan")
    if kind in ("resume", "rollback") and plan is not None:
        return f"{number} ({kind} of P-{plan})"
    return f"{number} ({kind} of {request['eligible_count']} in {request['queue']})"


def _utc(value: datetime) -> datetime:
    converted = as_utc(value)
    assert converted is not None
    return converted
