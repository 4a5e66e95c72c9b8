"""The incident tables: rows in, views out. Every function takes the caller's
connection and runs inside its transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import NotFound
from services.estate.profile import as_utc
from services.incidents.model import IncidentView, ObligationView, StepView, TimelineEntry
from services.models import (
    Approval,
    ChangeRequest,
    Incident,
    IncidentEvent,
    IncidentObligation,
    IncidentStep,
)

INCIDENTS = cast(sa.Table, Incident.__table__)
OBLIGATIONS = cast(sa.Table, IncidentObligation.__table__)
STEPS = cast(sa.Table, IncidentStep.__table__)
TIMELINE = cast(sa.Table, IncidentEvent.__table__)
REQUESTS = cast(sa.Table, ChangeRequest.__table__)
APPROVALS = cast(sa.Table, Approval.__table__)


class IncidentNotFound(NotFound):
    def __init__(self, number: int) -> None:
        super().__init__(f"INC-{number} does not exist; /incident status lists the open ones")


async def note(
    conn: AsyncConnection, number: int, *, at: datetime, kind: str, text: str, actor: str | None
) -> None:
    """One line on the incident's timeline."""
    await conn.execute(
        TIMELINE.insert().values(incident_id=number, at=at, kind=kind, actor=actor, text=text)
    )


async def note_many(conn: AsyncConnection, entries: Sequence[Mapping[str, Any]]) -> None:
    """Lines on incidents' timelines (each: incident_id, at, kind, actor, text), in one
    statement, in the order given."""
    if entries:
        await conn.execute(TIMELINE.insert(), [dict(entry) for entry in entries])


async def pending_obligations(
    conn: AsyncConnection, ids: Iterable[int]
) -> dict[int, tuple[IncidentView, ObligationView]]:
    """Of the obligations ``ids``, those still pending in open incidents, each with its
    incident (the incident's own fields only: no steps, no timeline), in one statement.
    They are locked in id order, so transactions that take several never wait on each
    other in a circle."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    found = await conn.execute(
        sa.select(
            OBLIGATIONS,
            INCIDENTS.c.scenario,
            INCIDENTS.c.runbook,
            INCIDENTS.c.summary,
            INCIDENTS.c.state.label("incident_state"),
            INCIDENTS.c.queue,
            INCIDENTS.c.lead,
            INCIDENTS.c.declared_at,
            INCIDENTS.c.fault_at,
            INCIDENTS.c.resolved_at,
        )
        .join(INCIDENTS, INCIDENTS.c.id == OBLIGATIONS.c.incident_id)
        .where(
            OBLIGATIONS.c.id.in_(wanted),
            OBLIGATIONS.c.state == "pending",
            INCIDENTS.c.state == "open",
        )
        .order_by(OBLIGATIONS.c.id)
        .with_for_update(of=OBLIGATIONS)
    )
    pending: dict[int, tuple[IncidentView, ObligationView]] = {}
    for o in found.mappings():
        declared = _utc(o["declared_at"])
        incident = IncidentView(
            number=int(o["incident_id"]),
            scenario=str(o["scenario"]),
            runbook=str(o["runbook"] or o["scenario"]),
            summary=str(o["summary"]),
            state=str(o["incident_state"]),
            queue=o["queue"],
            lead=o["lead"],
            declared_at=declared,
            fault_at=as_utc(o["fault_at"]),
            resolved_at=as_utc(o["resolved_at"]),
        )
        pending[int(o["id"])] = (incident, _obligation(o, declared))
    return pending


async def row(conn: AsyncConnection, number: int, *, lock: bool = False) -> dict[str, Any]:
    query = sa.select(INCIDENTS).where(INCIDENTS.c.id == number)
    if lock:
        query = query.with_for_update()
    found = (await conn.execute(query)).mappings().first()
    if found is None:
        raise IncidentNotFound(number)
    return dict(found)


async def open_for(conn: AsyncConnection, scenario: str, queue: str | None) -> int | None:
    """The open incident of this scenario and queue, if there is one."""
    same_queue = INCIDENTS.c.queue.is_(None) if queue is None else INCIDENTS.c.queue == queue
    found = (
        await conn.execute(
            sa.select(INCIDENTS.c.id)
            .where(INCIDENTS.c.scenario == scenario, INCIDENTS.c.state == "open", same_queue)
            .order_by(INCIDENTS.c.id)
            .limit(1)
        )
    ).scalar_one_or_none()
    return None if found is None else int(found)


async def newest_from(
    conn: AsyncConnection, platform: str, channel: str | None, *, among: int = 500
) -> int | None:
    """The newest incident declared in this channel (of the newest ``among``), if any."""
    found = await conn.execute(
        sa.select(INCIDENTS.c.id, INCIDENTS.c.origin).order_by(INCIDENTS.c.id.desc()).limit(among)
    )
    for number, origin in found:
        said = origin if isinstance(origin, dict) else {}
        if said.get("platform") == platform and said.get("channel") == channel:
            return int(number)
    return None


async def newest(conn: AsyncConnection) -> int | None:
    found = await conn.execute(sa.select(sa.func.max(INCIDENTS.c.id)))
    number = found.scalar_one_or_none()
    return None if number is None else int(number)


async def open_numbers(conn: AsyncConnection) -> list[int]:
    found = await conn.execute(
        sa.select(INCIDENTS.c.id).where(INCIDENTS.c.state == "open").order_by(INCIDENTS.c.id)
    )
    return [int(n) for n in found.scalars()]


async def view(conn: AsyncConnection, number: int) -> IncidentView:
    incident = await row(conn, number)
    declared = as_utc(incident["declared_at"])
    assert declared is not None
    obligations = await _children(conn, OBLIGATIONS, number, "due_at", "id")
    steps = await _children(conn, STEPS, number, "kind", "position")
    timeline = await _children(conn, TIMELINE, number, "at", "id")
    return IncidentView(
        number=number,
        scenario=str(incident["scenario"]),
        runbook=str(incident["runbook"] or incident["scenario"]),
        summary=str(incident["summary"]),
        state=str(incident["state"]),
        queue=incident["queue"],
        lead=incident["lead"],
        declared_at=declared,
        fault_at=as_utc(incident["fault_at"]),
        resolved_at=as_utc(incident["resolved_at"]),
        obligations=tuple(_obligation(o, declared) for o in obligations),
        steps=tuple(
            StepView(
                kind=str(s["kind"]),
                position=int(s["position"]),
                name=str(s["name"]),
                state=str(s["state"]),
                check_id=s["check_id"],
                done_at=as_utc(s["done_at"]),
                done_by=s["done_by"],
                result=s["result"],
            )
            for s in steps
        ),
        timeline=tuple(
            TimelineEntry(_utc(t["at"]), str(t["kind"]), t["actor"], str(t["text"]))
            for t in timeline
        )
        + tuple(await _changes(conn, f"INC-{number}")),
    )


def _obligation(o: sa.RowMapping, declared: datetime) -> ObligationView:
    return ObligationView(
        id=int(o["id"]),
        audience=str(o["audience"]),
        channel_dependency=str(o["channel_dependency"]),
        within=timedelta(milliseconds=int(o["within_ms"])),
        due_at=_utc(o["due_at"]),
        state=str(o["state"]),
        met_at=as_utc(o["met_at"]),
        met_by=o["met_by"],
        declared_at=declared,
    )


async def _changes(conn: AsyncConnection, name: str) -> list[TimelineEntry]:
    """The change requests made under the incident (``--incident INC-N``): requested,
    approved or rejected, and how they ended."""
    entries: list[TimelineEntry] = []
    requests = (
        (await conn.execute(sa.select(REQUESTS).where(REQUESTS.c.incident == name)))
        .mappings()
        .all()
    )
    for request in requests:
        label = (
            f"CR-{request['id']} (resolve without every validation item)"
            if request["kind"] == "resolve"
            else f"CR-{request['id']} ({request['kind']} of {request['eligible_count']} "
            f"in {request['queue']})"
        )
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


async def _children(
    conn: AsyncConnection, table: sa.Table, number: int, *order: str
) -> Sequence[sa.RowMapping]:
    """The incident's rows of ``table`` (obligations, steps, timeline), in ``order``."""
    found = await conn.execute(
        sa.select(table)
        .where(table.c.incident_id == number)
        .order_by(*(table.c[name] for name in order))
    )
    return found.mappings().all()


def _utc(value: datetime) -> datetime:
    converted = as_utc(value)
    assert converted is not None
    return converted
