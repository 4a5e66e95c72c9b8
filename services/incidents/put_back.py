"""What an incident put back into the queue measured: the rows its plans of that queue
redrove (and did not roll back), the rows its executed redrive and requeue requests on
that queue changed, and when the first of them went back. A request made under the
incident on another queue put nothing back into this one. The redrive validation checks
(``redrive_checks``) judge these.

Read-only steps in the caller's transaction, on queuebot's own tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import ChangeItem, ChangeOutcome, ChangeRequest, Plan
from services.estate.ops import ItemRef
from services.estate.profile import as_utc
from services.plans import store as plan_store

PLANS = cast(sa.Table, Plan.__table__)
REQUESTS = cast(sa.Table, ChangeRequest.__table__)
CHANGE_ITEMS = cast(sa.Table, ChangeItem.__table__)
OUTCOMES = cast(sa.Table, ChangeOutcome.__table__)
# The requests that put rows back: a staged redrive (its plan's waves), and named rows
# redriven or requeued at once (their changed items).
PUTS_BACK = ("plan", "redrive", "requeue")
AT_ONCE = ("redrive", "requeue")


@dataclass(frozen=True)
class PutBack:
    incident: str  # INC-1
    items: tuple[ItemRef, ...]  # each row once, as the queue's profile reads it
    by: tuple[str, ...]  # the plans and requests that put them back: P-1, CR-4
    first: datetime | None = None  # when the first row went back
    first_by: str | None = None  # the request that put it back: CR-1

    @property
    def jobs(self) -> int:
        return len({i.job_id for i in self.items})

    @property
    def named(self) -> str:
        return ", ".join(self.by)


async def of(conn: AsyncConnection, incident: str, queue: str) -> PutBack:
    """What incident ``incident`` (INC-1) put back into ``queue``."""
    items: dict[tuple[str, str | None], ItemRef] = {}
    by: list[str] = []
    plans = (
        await conn.execute(
            sa.select(PLANS.c.id)
            .where(PLANS.c.incident == incident, PLANS.c.queue == queue)
            .order_by(PLANS.c.id)
        )
    ).scalars()
    for plan in plans.all():
        redriven = await plan_store.redriven_refs(conn, int(plan))
        if redriven:
            by.append(f"P-{plan}")
        for ref in redriven:
            items.setdefault((ref.job_id, ref.part), ref)
    requests = (
        await conn.execute(
            sa.select(REQUESTS.c.id, REQUESTS.c.kind, REQUESTS.c.decided_at)
            .where(
                REQUESTS.c.incident == incident,
                REQUESTS.c.queue == queue,
                REQUESTS.c.state == "executed",
                REQUESTS.c.kind.in_(PUTS_BACK),
            )
            .order_by(REQUESTS.c.decided_at, REQUESTS.c.id)
        )
    ).all()
    for number, kind, _ in requests:
        if kind in AT_ONCE:
            changed = await _changed(conn, int(number))
            if changed:
                by.append(f"CR-{number}")
            for ref in changed:
                items.setdefault((ref.job_id, ref.part), ref)
    if not requests:
        return PutBack(incident, tuple(items.values()), tuple(by))
    number, _, at = requests[0]
    return PutBack(incident, tuple(items.values()), tuple(by), as_utc(at), f"CR-{number}")


async def _changed(conn: AsyncConnection, request: int) -> list[ItemRef]:
    """The rows a request changed: its items that have an outcome."""
    joined = CHANGE_ITEMS.join(
        OUTCOMES,
        sa.and_(
            OUTCOMES.c.request_id == CHANGE_ITEMS.c.request_id,
            OUTCOMES.c.seq == CHANGE_ITEMS.c.seq,
        ),
    )
    rows = await conn.execute(
        sa.select(CHANGE_ITEMS.c.job_id, CHANGE_ITEMS.c.part)
        .select_from(joined)
        .where(CHANGE_ITEMS.c.request_id == request)
        .order_by(CHANGE_ITEMS.c.seq)
    )
    return [ItemRef(str(job), part, {}) for job, part in rows.all()]
