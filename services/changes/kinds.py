"""The kinds of change request, each registered by the domain that owns it.

The hub (this package) holds what every request shares: the two-person rule, the
snapshot of its rows (kept as its items, their digest in its audit event), the quorum and
the audit. What a kind freezes, how it executes once approved and what it says are the
kind's own: a domain registers its kinds on ``Kinds`` in its ``jobs.py``, beside its
scheduler and outbox kinds, and the hub asks a request's kind by its name. Adding an
approvable action is a ``Kind`` in the domain it acts on, and one line in its
``register``.

Each step of a kind runs in the hub's transaction: it takes the connection and never
commits; what it posts follows the commit (``services.db.on_commit``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import Actor
from services.audit.row_digest import EMPTY, Digest
from services.changes.model import Executed, RequestRow
from services.changes.words import GENERIC, KindWords
from services.estate.ops import Ineligible, Selector, Target
from services.estate.profile import QueueProfile

NOTHING_CHANGED = Digest(0, EMPTY)  # no row image from before a change: none was changed
# Rows a freeze hands over a page at a time: the hub keeps each page as the request's
# items at once (the request's row written with the first page), so no kind holds them all.
Keep = Callable[[list[Target]], Awaitable[None]]


@dataclass(frozen=True)
class Scope:
    """Where a request belongs: its queue and incident (None: not named, not found), and
    the plan it took its incident from where nobody named one."""

    queue: str | None
    incident: str | None
    incident_from: int | None = None


@dataclass(frozen=True)
class Ask:
    """What a person asked for, as a kind freezes it."""

    kind: str
    profile: QueueProfile
    selector: Selector
    reason: str
    incident: str | None
    requester: str | None
    now: datetime


@dataclass(frozen=True)
class Found:
    """What a kind's freeze found: the rows it hands back (``targets``, kept by the hub)
    where it did not keep them itself a page at a time (``Keep``), those it left out, its
    checks as the request shows them, the waves of a staged change, and how many rows the
    request concerns where that is not its targets."""

    targets: list[Target]
    ineligible: list[Ineligible]
    checks: list[tuple[str, str, str]] = field(default_factory=list)  # name, verdict, detail
    schedule: list[int] = field(default_factory=list)
    affected: int | None = None
    by_signature: list[tuple[str, int]] | None = None  # None: counted from ``targets``
    ineligible_count: int | None = None  # every row left out, where ``ineligible`` names some


@dataclass(frozen=True)
class Done:
    """What executing a request did, for its result and its audit event: the outcome and
    the digest of its changed rows' images from just before the change."""

    outcome: Executed
    before: Digest = NOTHING_CHANGED


class Kind(ABC):
    """One kind of change request. ``rowless``: it may be asked for with no rows frozen
    (what it concerns is a plan's, or an incident's); ``words``: what it says."""

    name: str
    rowless = False
    words: KindWords = GENERIC

    async def scope(
        self, conn: AsyncConnection, selector: Selector, *, queue: str | None, incident: str | None
    ) -> Scope:
        """The queue and incident the request belongs to: by default as asked."""
        return Scope(queue, incident)

    @abstractmethod
    async def freeze(self, conn: AsyncConnection, ask: Ask, keep: Keep) -> Found:
        """What the request will change, found and checked before anyone approves it."""

    @abstractmethod
    async def execute(
        self,
        conn: AsyncConnection,
        request: RequestRow,
        *,
        actor: Actor,
        approvers: list[str],
        now: datetime,
    ) -> Done:
        """The approved change, in the approval's transaction."""

    def judged_rows(self, rows: int, schedule: Sequence[int]) -> int:
        """The rows the quorum judges the request by: those it changes before a person
        can stop it (by default every one)."""
        return rows


class Kinds:
    """The kinds of change request a process takes, by name."""

    def __init__(self) -> None:
        self._kinds: dict[str, Kind] = {}

    def register(self, kind: Kind) -> None:
        if kind.name in self._kinds:
            raise ValueError(f"the change request kind {kind.name!r} is registered twice")
        self._kinds[kind.name] = kind

    def find(self, name: str) -> Kind | None:
        return self._kinds.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._kinds)
