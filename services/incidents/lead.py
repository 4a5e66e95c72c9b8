"""Handing an incident's lead over, in one transaction: the incident's lead columns,
a line on its timeline, an ``incident.lead_changed`` audit event (from whom, to whom,
and what the new lead's authority rests on) and a post in its thread calling the new
lead. Who may hand it to whom is decided in ``commands/`` before this runs; here the
lead it was decided against must still be the lead (else ``Conflict``: someone else
handed it over meanwhile)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor, AuditTrail
from services.errors import Conflict
from services.incidents import messages, store, timeline
from services.incidents.authority import Authority
from services.incidents.model import IncidentView, Lead, number_text
from services.incidents.publish import queue_post

LEAD_CHANGED = "incident.lead_changed"


def said(actor: Actor, before: Lead, after: Lead) -> str:
    """The timeline's line: who handed the lead to whom, or who took it."""
    by = Lead(actor.person, actor.platform, actor.account)
    if by.same(after):
        taken = f"{after.shown()} took the lead"
        return f"{taken} from {before.shown()}" if before.known else taken
    if before.known and by.same(before):
        return f"{before.shown()} handed the lead to {after.shown()}"
    return f"{by.shown()} gave the lead to {after.shown()}" + (
        f" (it was {before.shown()}'s)" if before.known else ""
    )


async def hand_over(
    conn: AsyncConnection,
    audit: AuditTrail,
    authority: Authority,
    number: int,
    *,
    to: Lead,
    expected: Lead,
    actor: Actor,
    basis: Sequence[Mapping[str, Any]],
    now: datetime,
) -> IncidentView:
    """Make ``to`` the lead of an open incident whose lead is still ``expected``."""
    name = number_text(number)
    if await store.state(conn, number, lock=True) != "open":
        raise Conflict(f"{name} is resolved: its lead stays as the postmortem records it")
    view = await store.view(conn, number)
    before = Lead.of(view)
    if before != expected:
        raise Conflict(
            f"the lead of {name} changed meanwhile (now {before.shown()}): "
            f"/incident status {name}, then ask again"
        )
    await store.set_lead(conn, number, to)
    line = said(actor, before, to)
    await timeline.note(conn, number, at=now, kind="lead", text=line, actor=actor.person)
    await audit.append(
        conn,
        action=LEAD_CHANGED,
        actor=actor,
        at=now,
        subject=name,
        queue=view.queue,
        incident=name,
        details={
            "from": before.jsonable(),
            "to": to.jsonable(),
            # what the new lead's declaration authority rested on, read when
            "basis": [dict(b) for b in basis],
        },
    )
    after = await store.view(conn, number)
    await queue_post(
        conn, number, "thread", messages.lead_changed(after, line, authority.of(to)), now
    )
    return after
