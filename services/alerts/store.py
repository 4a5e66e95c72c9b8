"""Reads of the alert groups for other domains: what an incident declared from an alert
group needs to know of it, without reading the alerts' tables itself. Every function
takes the caller's connection and runs inside its transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.alerts.desk import GROUPS
from services.alerts.groups import AlertRecord
from services.notify import MessageRef


@dataclass(frozen=True)
class GroupSummary:
    """An alert group as an incident declared from it sees it."""

    id: int
    alertname: str
    queue: str | None
    route: Mapping[str, Any]  # its route as stored (``scenario`` names the runbook)
    started_at: datetime | None  # the earliest startsAt of its alerts

    @property
    def scenario(self) -> str | None:
        found = self.route.get("scenario")
        return str(found) if found else None


async def group_summary(conn: AsyncConnection, group: int) -> GroupSummary | None:
    """The alert group ``group``, or None where it does not exist."""
    found = (
        await conn.execute(
            sa.select(GROUPS.c.alertname, GROUPS.c.queue, GROUPS.c.route, GROUPS.c.alerts).where(
                GROUPS.c.id == group
            )
        )
    ).first()
    if found is None:
        return None
    alertname, queue, route, alerts = found
    records = [AlertRecord.from_json(fp, data) for fp, data in (alerts or {}).items()]
    starts = [r.starts_at for r in records if r.starts_at is not None]
    return GroupSummary(
        id=group,
        alertname=alertname,
        queue=queue,
        route=route or {},
        started_at=min(starts) if starts else None,
    )


async def group_roots(conn: AsyncConnection, group: int) -> list[MessageRef]:
    """Every message that opened a thread of the alert group, in any channel (none where
    the group does not exist or never posted)."""
    roots = (
        await conn.execute(sa.select(GROUPS.c.roots).where(GROUPS.c.id == group))
    ).scalar_one_or_none() or {}
    return [MessageRef(**ref) for refs in (roots.get("posts") or {}).values() for ref in refs]
