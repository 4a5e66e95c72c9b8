"""A change request's row before and after its rows are counted, where its frozen rows
are kept, what its audit event says of overridden checks, and why a request that would change
nothing is refused: the steps ``ChangeRequests`` composes, each in the caller's
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.audit.row_digest import Digest
from services.changes.model import OVERRIDDEN, RequestState
from services.estate import items
from services.estate.ops import Ineligible, Selector, Target, in_database
from services.estate.profile import QueueProfile
from services.jsonable import jsonable


def overridden(checks: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
    """The failed checks the requester overrode (with who, why and what was measured),
    named in the request's audit event; nothing where none was."""
    overridden = [[name, detail] for name, verdict, detail in checks if verdict == OVERRIDDEN]
    return {"overridden": overridden} if overridden else {}


def nothing_to_do(
    kind: str, selector: Selector, ineligible: list[Ineligible], total: int | None = None
) -> str:
    """Why a request changes nothing; ``total``: how many rows were ineligible, where
    ``ineligible`` names only some of them."""
    if not ineligible:
        return f"nothing to {kind}: no rows match {selector.describe()}"
    named = [i for i in ineligible if not i.id.endswith(" more")]
    total = len(named) if total is None else total
    listed = "; ".join(f"{i.id}: {i.why}" for i in named[:10])
    more = f" (and {total - 10:,} more)" if total > 10 else ""
    return f"nothing to {kind}: every row named is ineligible ({listed}{more})"


async def keep_items(
    conn: AsyncConnection, profile: QueueProfile, number: int, targets: list[Target], first: int = 0
) -> Digest:
    """The frozen rows as the request's items, numbered from ``first``: copied by the
    database where the profile can have it do so, else written from the images the
    freeze built. The digest of the items written (their images and their keys, as
    ``row_digest.kept_digest`` reads them back)."""
    kept = in_database(profile.changes, conn.dialect.name)
    if targets and kept is not None:
        return await kept.keep(conn, request=number, targets=targets, first=first)
    return await items.write(conn, request=number, targets=targets, first=first)


@dataclass(frozen=True)
class Draft:
    """What a request's row says before its rows are counted, and the row once they are."""

    kind: str
    profile: QueueProfile
    now: datetime
    expiry: timedelta
    actor: Actor
    reason: str
    incident: str | None
    evidence: str | None
    selector: Selector
    origin: dict[str, Any]
    incident_from: int | None

    @property
    def selected(self) -> dict[str, Any]:
        return self.selector.as_json()  # plain JSON types already: no copy of every id

    def row(
        self,
        *,
        count: int = 0,
        required: int = 1,
        ineligible: Sequence[Ineligible] = (),
        by_signature: Sequence[tuple[str, int]] = (),
        checks: Sequence[tuple[str, str, str]] = (),
        schedule: Sequence[int] = (),
    ) -> dict[str, Any]:
        """The request's row (before its rows are counted: the defaults)."""
        return {
            "kind": str(self.kind),
            "queue": self.profile.queue,
            "profile": self.profile.name,
            "state": RequestState.PENDING.value,
            "requested_at": self.now,
            "expires_at": self.now + self.expiry,
            "requester_person": self.actor.person,
            "requester_platform": self.actor.platform,
            "requester_account": self.actor.account,
            "reason": self.reason,
            "incident": self.incident,
            "evidence": self.evidence,
            "selector": self.selected,
            "targets": {"items": []},  # the rows are kept as the request's items
            "ineligible": {"items": [[i.id, i.why] for i in ineligible]},
            "snapshot_hash": "",  # set once the items are written
            "preview": {
                "by_signature": [list(s) for s in by_signature],
                "checks": [list(c) for c in checks],
                "schedule": list(schedule),
                "plan": self.selector.plan,
                "incident_from": self.incident_from,
            },
            "eligible_count": count,
            "approvals_required": required,
            "origin": jsonable(self.origin),
        }
