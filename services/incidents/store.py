"""The incident tables: rows in, views out (an incident's communication obligations
are ``obligations``'). Every function takes the caller's connection and runs inside its
transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.db.tables import Incident, IncidentStep
from services.errors import NotFound
from services.estate.profile import as_utc
from services.incidents import obligations, timeline
from services.incidents.model import IncidentView, Lead, ObligationView, StepView
from services.runbooks import Runbook

INCIDENTS = cast(sa.Table, Incident.__table__)
STEPS = cast(sa.Table, IncidentStep.__table__)


# an incident's own fields, as the views read them beside an obligation
_INCIDENT = (
    INCIDENTS.c.scenario,
    INCIDENTS.c.runbook,
    INCIDENTS.c.summary,
    INCIDENTS.c.state.label("incident_state"),
    INCIDENTS.c.queue,
    INCIDENTS.c.lead,
    INCIDENTS.c.lead_platform,
    INCIDENTS.c.lead_account,
    INCIDENTS.c.declared_at,
    INCIDENTS.c.fault_at,
    INCIDENTS.c.resolved_at,
)

# the open incidents, each with its obligations (none: one row, its obligation's NULL)
_OPEN = (
    sa.select(
        INCIDENTS.c.id.label("number"),
        *_INCIDENT,
        *(c for c in obligations.OBLIGATIONS.c),
    )
    .select_from(
        INCIDENTS.outerjoin(
            obligations.OBLIGATIONS, obligations.OBLIGATIONS.c.incident_id == INCIDENTS.c.id
        )
    )
    .where(INCIDENTS.c.state == "open")
    .order_by(INCIDENTS.c.id, obligations.OBLIGATIONS.c.due_at, obligations.OBLIGATIONS.c.id)
)


class IncidentNotFound(NotFound):
    def __init__(self, number: int) -> None:
        super().__init__(f"INC-{number} does not exist; /incident status lists the open ones")


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
            obligations.OBLIGATIONS,
            *_INCIDENT,
        )
        .join(INCIDENTS, INCIDENTS.c.id == obligations.OBLIGATIONS.c.incident_id)
        .where(
            obligations.OBLIGATIONS.c.id.in_(wanted),
            obligations.OBLIGATIONS.c.state == "pending",
            INCIDENTS.c.state == "open",
        )
        .order_by(obligations.OBLIGATIONS.c.id)
        .with_for_update(of=obligations.OBLIGATIONS)
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
            lead_platform=o["lead_platform"],
            lead_account=o["lead_account"],
            declared_at=declared,
            fault_at=as_utc(o["fault_at"]),
            resolved_at=as_utc(o["resolved_at"]),
        )
        pending[int(o["id"])] = (incident, obligations.as_view(o, declared))
    return pending


async def state(conn: AsyncConnection, number: int, *, lock: bool = False) -> str:
    """The incident's state (open | resolved), its row locked till commit with ``lock``."""
    query = sa.select(INCIDENTS.c.state).where(INCIDENTS.c.id == number)
    if lock:
        query = query.with_for_update()
    found = (await conn.execute(query)).scalar_one_or_none()
    if found is None:
        raise IncidentNotFound(number)
    return str(found)


async def row(conn: AsyncConnection, number: int) -> sa.RowMapping:
    found = (
        (await conn.execute(sa.select(INCIDENTS).where(INCIDENTS.c.id == number)))
        .mappings()
        .first()
    )
    if found is None:
        raise IncidentNotFound(number)
    return found


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


async def open_views(conn: AsyncConnection) -> list[IncidentView]:
    """Every open incident, oldest first, with its communications: its own fields and its
    obligations only (no steps, no timeline), in one statement however many are open."""
    views: dict[int, tuple[sa.RowMapping, list[ObligationView]]] = {}
    for row in (await conn.execute(_OPEN)).mappings():
        number = int(row["number"])
        incident, owed = views.setdefault(number, (row, []))
        if row["id"] is not None:  # an incident whose runbook tells nobody has none
            owed.append(obligations.as_view(row, _utc(incident["declared_at"])))
    return [
        IncidentView(
            number=number,
            scenario=str(row["scenario"]),
            runbook=str(row["runbook"] or row["scenario"]),
            summary=str(row["summary"]),
            state=str(row["incident_state"]),
            queue=row["queue"],
            lead=row["lead"],
            lead_platform=row["lead_platform"],
            lead_account=row["lead_account"],
            declared_at=_utc(row["declared_at"]),
            fault_at=as_utc(row["fault_at"]),
            resolved_at=as_utc(row["resolved_at"]),
            obligations=tuple(owed),
        )
        for number, (row, owed) in views.items()
    ]


async def view(conn: AsyncConnection, number: int) -> IncidentView:
    incident = await row(conn, number)
    declared = as_utc(incident["declared_at"])
    assert declared is not None
    owed = await _children(conn, obligations.OBLIGATIONS, number, "due_at", "id")
    steps = await _children(conn, STEPS, number, "kind", "position")
    return IncidentView(
        number=number,
        scenario=str(incident["scenario"]),
        runbook=str(incident["runbook"] or incident["scenario"]),
        summary=str(incident["summary"]),
        state=str(incident["state"]),
        queue=incident["queue"],
        lead=incident["lead"],
        lead_platform=incident["lead_platform"],
        lead_account=incident["lead_account"],
        declared_at=declared,
        fault_at=as_utc(incident["fault_at"]),
        resolved_at=as_utc(incident["resolved_at"]),
        blocks_redrive_until=incident["blocks_redrive_until"],
        blocks_redrive=bool(incident["blocks_redrive"]),
        obligations=tuple(obligations.as_view(o, declared) for o in owed),
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
        timeline=tuple(await timeline.entries(conn, number)),
    )


async def thread_of(
    conn: AsyncConnection, number: int
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any], int | None]:
    """The incident's thread (as stored: None before its checklist is posted), where it
    was declared (its ``origin``) and the alert group it was declared from."""
    found = (
        await conn.execute(
            sa.select(INCIDENTS.c.thread, INCIDENTS.c.origin, INCIDENTS.c.alert_group).where(
                INCIDENTS.c.id == number
            )
        )
    ).one()
    return found[0], found[1] or {}, found[2]


# -- writes: each in the caller's transaction ---------------------------------------


async def insert_incident(  # noqa: PLR0917 - one call site, every value named there
    conn: AsyncConnection,
    runbook: Runbook,
    summary: str,
    actor: Actor,
    queue: str | None,
    origin: Mapping[str, Any] | None,
    alert_group: int | None,
    fault_at: datetime | None,
    now: datetime,
) -> int:
    """A new open incident's row; its number."""
    inserted = await conn.execute(
        INCIDENTS.insert()
        .values(
            scenario=runbook.scenario_id,
            summary=summary,
            state="open",
            # held only where the runbook says so, until that restore step is done
            blocks_redrive=runbook.blocks_redrives_until is not None,
            blocks_redrive_until=runbook.blocks_redrives_until,
            queue=queue,
            declared_at=now,
            runbook=runbook.id,
            runbook_version=runbook.version,
            lead=actor.person,
            lead_platform=actor.platform,
            lead_account=actor.account,
            fault_at=fault_at,
            alert_group=alert_group,
            origin=dict(origin or {}),
            thread=None,
        )
        .returning(INCIDENTS.c.id)
    )
    return int(inserted.scalar_one())


async def insert_steps(conn: AsyncConnection, number: int, runbook: Runbook) -> None:
    """The runbook's restore order then its validation items, pending, in order."""
    steps: list[tuple[str, str, str | None]] = [
        ("restore", name, None) for name in runbook.restore_order
    ]
    steps += [("validation", item.text, item.check) for item in runbook.validation]
    for position, (kind, name, check) in enumerate(steps):
        await conn.execute(
            STEPS.insert().values(
                incident_id=number,
                kind=kind,
                position=position,
                name=name,
                check_id=check,
                state="pending",
            )
        )


async def step_done(
    conn: AsyncConnection,
    number: int,
    step: StepView,
    *,
    at: datetime,
    by: str | None,
    result: str | None,
) -> None:
    await conn.execute(
        STEPS.update()
        .where(
            STEPS.c.incident_id == number,
            STEPS.c.kind == step.kind,
            STEPS.c.position == step.position,
        )
        .values(state="done", done_at=at, done_by=by, result=result)
    )


async def measured(
    conn: AsyncConnection,
    number: int,
    step: StepView,
    *,
    says: str,
    passed_at: datetime | None,
    by: str,
) -> None:
    """A measurement of a validation item: what it says, and done where it passed
    (``passed_at``)."""
    values: dict[str, Any] = {"result": says}
    if passed_at is not None:
        values.update(state="done", done_at=passed_at, done_by=by)
    await conn.execute(
        STEPS.update()
        .where(
            STEPS.c.incident_id == number,
            STEPS.c.kind == "validation",
            STEPS.c.name == step.name,
        )
        .values(**values)
    )


async def override_unvalidated(
    conn: AsyncConnection, number: int, *, at: datetime, by: str, result: str
) -> None:
    """Every validation item not done, overridden, in one statement."""
    await conn.execute(
        STEPS.update()
        .where(
            STEPS.c.incident_id == number,
            STEPS.c.kind == "validation",
            STEPS.c.state != "done",
        )
        .values(state="overridden", done_at=at, done_by=by, result=result)
    )


async def release_redrives(conn: AsyncConnection, number: int) -> None:
    """The incident no longer holds redrives on its queue (its restore step is done)."""
    await conn.execute(
        INCIDENTS.update().where(INCIDENTS.c.id == number).values(blocks_redrive=False)
    )


async def set_thread(conn: AsyncConnection, number: int, refs: Sequence[Mapping[str, Any]]) -> None:
    """Where the incident's checklist was posted: its news goes there."""
    await conn.execute(
        INCIDENTS.update().where(INCIDENTS.c.id == number).values(thread={"refs": list(refs)})
    )


async def set_lead(conn: AsyncConnection, number: int, lead: Lead) -> None:
    """The incident's new lead (a handoff)."""
    await conn.execute(
        INCIDENTS.update()
        .where(INCIDENTS.c.id == number)
        .values(lead=lead.name, lead_platform=lead.platform, lead_account=lead.account)
    )


async def resolved(conn: AsyncConnection, number: int, at: datetime) -> None:
    await conn.execute(
        INCIDENTS.update().where(INCIDENTS.c.id == number).values(state="resolved", resolved_at=at)
    )


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
