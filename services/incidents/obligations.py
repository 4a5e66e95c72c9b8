"""An incident's communications owed (``qb_incident_obligations``): each audience its
runbook names, told within its time or missed, with the reminders sent. Rows in, views
out; every function takes the caller's connection and runs inside its transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import IncidentObligation
from services.estate.profile import as_utc
from services.incidents.model import ObligationView
from services.runbooks import Communication

OBLIGATIONS = cast(sa.Table, IncidentObligation.__table__)


async def insert_obligation(
    conn: AsyncConnection, number: int, communication: Communication, due: datetime
) -> int:
    """A pending communication of the incident; its id."""
    inserted = await conn.execute(
        OBLIGATIONS.insert()
        .values(
            incident_id=number,
            audience=communication.audience,
            channel_dependency=communication.channel_dependency_id,
            within_ms=communication.within_ms,
            due_at=due,
            state="pending",
            reminders=0,
        )
        .returning(OBLIGATIONS.c.id)
    )
    return int(inserted.scalar_one())


async def obligation_to(conn: AsyncConnection, number: int, audience: str) -> int | None:
    """The id of the incident's communication to ``audience``, if its runbook has one."""
    found = await conn.execute(
        sa.select(OBLIGATIONS.c.id).where(
            OBLIGATIONS.c.incident_id == number, OBLIGATIONS.c.audience == audience
        )
    )
    obligation = found.scalar_one_or_none()
    return None if obligation is None else int(obligation)


async def lock_obligation(conn: AsyncConnection, obligation: int) -> tuple[str, datetime | None]:
    """Lock the obligation's row till commit; its state and when it was met."""
    found = (
        await conn.execute(
            sa.select(OBLIGATIONS.c.state, OBLIGATIONS.c.met_at)
            .where(OBLIGATIONS.c.id == obligation)
            .with_for_update()
        )
    ).one()
    return str(found[0]), found[1]


async def met(
    conn: AsyncConnection, obligation: int, *, late: bool, at: datetime, by: str | None
) -> None:
    """The obligation's message delivered at ``at``: met, or missed where it was late."""
    await conn.execute(
        OBLIGATIONS.update()
        .where(OBLIGATIONS.c.id == obligation)
        .values(state="missed" if late else "met", met_at=at, met_by=by)
    )


async def pending_of(conn: AsyncConnection, number: int) -> list[int]:
    """The ids of the incident's communications still pending."""
    found = await conn.execute(
        sa.select(OBLIGATIONS.c.id).where(
            OBLIGATIONS.c.incident_id == number, OBLIGATIONS.c.state == "pending"
        )
    )
    return [int(o) for o in found.scalars().all()]


async def reminded(conn: AsyncConnection, counts: Mapping[int, int]) -> None:
    """Count the reminders sent (obligation id: how many), a statement per count."""
    by_count: dict[int, list[int]] = {}
    for obligation_id, count in counts.items():
        by_count.setdefault(count, []).append(obligation_id)
    for count, obligations in sorted(by_count.items()):
        await conn.execute(
            OBLIGATIONS.update()
            .where(OBLIGATIONS.c.id.in_(obligations))
            .values(reminders=OBLIGATIONS.c.reminders + count)
        )


async def missed(conn: AsyncConnection, ids: Sequence[int], at: datetime) -> None:
    """The obligations ``ids`` still pending: missed, escalated at ``at``."""
    if ids:
        await conn.execute(
            OBLIGATIONS.update()
            .where(OBLIGATIONS.c.id.in_(list(ids)), OBLIGATIONS.c.state == "pending")
            .values(state="missed", escalated_at=at)
        )


def as_view(o: sa.RowMapping, declared: datetime) -> ObligationView:
    """An obligation's row (with its incident's declaration time) as a view."""
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


def _utc(value: datetime) -> datetime:
    converted = as_utc(value)
    assert converted is not None
    return converted
