"""Each change request's row against its ``change.requested`` event: what was asked, by
whom, why and of which rows stays what the sealed event says, even though the runtime
role updates the row as the request moves on (its state, decision time and result).

Compared where the event carries it: the reason, the requester (person, platform and
account), the queue, the incident, the evidence, and from its details the kind, the
selector, the snapshot hash (the digest of the frozen rows), the approvals required, and
for requests from before their rows were kept as items, the frozen jobs' ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import ChangeRequest
from services.jsonable import canonical, digest, loads

_requests = cast(sa.Table, ChangeRequest.__table__)

# row column -> event column
_COLUMNS = {
    "reason": "reason",
    "requester_person": "actor_person",
    "requester_platform": "actor_platform",
    "requester_account": "actor_account",
    "queue": "queue",
    "incident": "incident",
    "evidence": "evidence",
}
# row column -> the event's details key
_DETAILS = {
    "kind": "kind",
    "snapshot_hash": "snapshot_hash",
    "approvals_required": "approvals_required",
}
_DIGESTED = {"selector": "selector", "targets": "job_ids"}  # large: kept as a digest


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "...'"


@dataclass
class RequestRecords:
    """The change requests as read before the walk, compared as the walk meets their
    ``change.requested`` events."""

    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)

    async def read(self, conn: AsyncConnection) -> None:
        columns = [_requests.c[name] for name in (*_COLUMNS, *_DETAILS, *_DIGESTED)]
        for row in await conn.execute(sa.select(_requests.c.id, *columns).order_by(_requests.c.id)):
            values = dict(row._mapping)
            values["selector"] = digest(values["selector"])
            legacy = (values["targets"] or {}).get("items") or []
            # requests kept as items keep no targets here: their rows' digest is checked
            values["targets"] = digest([t.get("id") for t in legacy]) if legacy else None
            self.rows[int(values.pop("id"))] = values

    def meet(self, row: sa.RowMapping) -> None:
        subject = row["subject"] or ""
        if row["action"] != "change.requested" or not subject.startswith("CR-"):
            return
        number = int(subject[3:]) if subject[3:].isdigit() else None
        values = self.rows.get(number) if number is not None else None
        if values is None:
            return  # a request the table does not have (deleted rows are not checked here)
        where = f"qb_change_requests row {number} ({subject})"
        event = f"its change.requested event {row['id']}"
        for column, source in _COLUMNS.items():
            if values[column] != row[source]:
                self.found.append(
                    f"{where}: {column} is {_shown(values[column])} but {event} says "
                    f"{_shown(row[source])}"
                )
        details: Any = loads(row["details"])
        if not isinstance(details, dict):
            return
        for column, key in _DETAILS.items():
            if key in details and canonical(values[column]) != canonical(details[key]):
                self.found.append(
                    f"{where}: {column} is {_shown(values[column])} but {event} says "
                    f"{_shown(details[key])}"
                )
        for column, key in _DIGESTED.items():
            if key not in details or (column == "targets" and values[column] is None):
                continue
            if values[column] != digest(details[key]):
                self.found.append(f"{where}: {column} is not the {key} {event} records")
