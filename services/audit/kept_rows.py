"""The rows a change request kept as its items (``qb_change_items``) against the digests
its audit events recorded: ``change.requested`` the images as frozen, ``change.executed``
the images from just before the change. The chain seals the digests, so an item edited,
added or deleted after the fact shows here even though the rows are not in the trail.

Requests made before their rows were kept as items carry the rows in their events, which
the chain seals directly; their events name no item digest and are not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import row_digest
from services.jsonable import loads

_RECORDED = {"change.requested": ("items", "frozen"), "change.executed": ("before", "before")}


@dataclass
class KeptRows:
    """Item digests met on the walk, checked against the items once the walk is done."""

    # request -> {"frozen" | "before": (event id, rows, sha256, keys sha256 or None)}
    recorded: dict[int, dict[str, tuple[int, int, str, str | None]]] = field(default_factory=dict)

    def meet(self, row: sa.RowMapping) -> None:
        spec = _RECORDED.get(row["action"])
        subject = row["subject"] or ""
        if spec is None or not subject.startswith("CR-") or not subject[3:].isdigit():
            return
        key, which = spec
        if '"sha256"' not in row["details"]:
            return  # no digest: a request from before items (parsing its rows is wasted)
        details: Any = loads(row["details"])
        digest = details.get(key) if isinstance(details, dict) else None
        if not isinstance(digest, dict) or "sha256" not in digest:
            return  # a request from before items, or an executed event without rows
        self.recorded.setdefault(int(subject[3:]), {})[which] = (
            int(row["id"]),
            int(digest.get("rows", -1)),
            str(digest["sha256"]),
            str(digest["keys_sha256"]) if "keys_sha256" in digest else None,
        )

    async def problem(self, conn: AsyncConnection) -> tuple[int, str] | None:
        """The first request whose items do not match its events: (event, why), or None."""
        for request in sorted(self.recorded):
            frozen, before = await row_digest.recompute(conn, request)
            now = {"frozen": frozen, "before": before}
            recorded = self.recorded[request]
            for which in ("frozen", "before"):  # the request's event comes first
                if which not in recorded:
                    continue
                event, rows, sha, keys = recorded[which]
                found = now[which]
                if (found.rows, found.sha256) == (rows, sha) and keys in (None, found.keys):
                    continue
                what = (
                    "as frozen (qb_change_items)"
                    if which == "frozen"
                    else "from just before the change (qb_change_outcomes)"
                )
                return (
                    event,
                    f"CR-{request}'s rows {what} do not match the digest "
                    f"event {event} recorded ({rows} row(s); the table now gives "
                    f"{found.rows}): an item was edited, added or deleted",
                )
        return None
