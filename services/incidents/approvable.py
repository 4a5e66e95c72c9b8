"""The incidents' kind of change request (registered by ``jobs.py``): resolving an
incident although validation items are not done. What is frozen is the list of the items
it skips; once another person approves, they are marked overridden and the incident
resolved (``Resolution.resolve_overridden``), in the approval's transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.changes.kinds import Ask, Done, Found, Keep, Kind
from services.changes.model import Executed, RequestRow
from services.incidents.messages import OverrideWords
from services.incidents.resolution import Resolution

RESOLVE = "resolve"  # an incident resolved although validation items are not done


def incident_number(ref: str | None) -> int:
    """``INC-12`` -> 12 (a resolve request always names its incident)."""
    if ref is None or not ref.startswith("INC-") or not ref[4:].isdigit():
        raise ValueError(f"a resolve request names its incident as INC-N, not {ref!r}")
    return int(ref[4:])


class ResolveOverride(Kind):
    name = RESOLVE
    rowless = True
    words = OverrideWords()

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution

    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        skipped = await self.resolution.unvalidated(conn, incident_number(ask.incident))
        return Found([], [], checks=skipped, affected=0)

    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> Done:
        await self.resolution.resolve_overridden(
            conn,
            number=incident_number(request.incident),
            request=request.ref,
            requester=request.requester_person,
            approvers=approvers,
            reason=request.reason,
            actor=actor,
            now=now,
        )
        return Done(Executed(approvers=approvers))
