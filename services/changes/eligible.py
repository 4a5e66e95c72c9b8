"""Who may approve: the people holding the approver role now, and a queue's owner teams,
one of whom must approve every change to it. The hub asks; ``services/access`` answers
from [people] and the groups teams keep (docs/access.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services.changes import store
from services.changes.model import RequestRow
from services.errors import PermissionDenied
from services.people import Directory


@dataclass(frozen=True)
class ApproverStanding:
    """What an approver's standing rests on now: the teams they belong to, and the
    grounds (which [people] entry, group or schedule, read when) their audit event keeps."""

    teams: frozenset[str] = frozenset()
    grounds: tuple[dict[str, Any], ...] = ()


class Eligibility(Protocol):
    async def approver_names(self) -> Sequence[str] | None:
        """Everyone holding the approver role now (None: not all of it could be read)."""
        ...

    def queue_owners(self, queue: str | None) -> tuple[str, ...]:
        """The teams that own ``queue`` (none: anyone with the role may approve)."""
        ...

    async def owner_names(self, teams: Sequence[str]) -> list[str]:
        """Everyone in any of ``teams`` now, by name."""
        ...

    def names_anyone(self) -> bool:
        """Whether anyone could hold a role here."""
        ...


class OwnerApprovalNeeded(PermissionDenied):
    """The approval would complete a change to an owned queue no owner has approved."""

    def __init__(self, *, number: int, queue: str, teams: Sequence[str], who: Sequence[str] = ()):
        self.number, self.queue, self.teams = number, queue, tuple(teams)
        names = f" ({', '.join(who)})" if who else " (nobody holds it now)"
        team_words = " or ".join(f"team {t}" for t in teams)
        super().__init__(
            f"CR-{number} changes queue {queue}, which {team_words} owns: one approval must "
            f"come from an owner{names}, and yours would complete it without one. Your "
            "approval was not recorded; ask an owner to approve."
        )

    async def named(self, eligible: Eligibility | None, approver: str) -> OwnerApprovalNeeded:
        """The refusal naming the owners who could approve instead."""
        owners = await eligible.owner_names(self.teams) if eligible else []
        who = [o for o in owners if o != approver]
        return OwnerApprovalNeeded(number=self.number, queue=self.queue, teams=self.teams, who=who)


def approvers_of(who: Eligibility | None, people: Directory | None) -> Eligibility | None:
    """Who may approve, and who owns which queue: ``who`` (services/access) where it
    knows anyone, [people] alone where only they are known; None where nobody is (no
    command can then request a change, and nothing is checked of approvals)."""
    if who is not None and who.names_anyone():
        return who
    return NamedApprovers(people) if people is not None and people.names() else None


class NamedApprovers:
    """Who may approve where only [people] says (no groups, no owners): services wired
    without ``services/access``, as a test's or a bench's are."""

    def __init__(self, people: Directory) -> None:
        self.people = people

    async def approver_names(self) -> list[str]:
        return [p.name for p in self.people.with_role("approver")]

    def queue_owners(self, queue: str | None) -> tuple[str, ...]:
        return ()

    async def owner_names(self, teams: Sequence[str]) -> list[str]:
        return []

    def names_anyone(self) -> bool:
        return bool(self.people.names())


async def owners_line(who: Eligibility | None, queue: str | None, requester: str) -> str | None:
    """What a pending request to an owned queue says: one approval must come from an
    owner, and who they are now."""
    owners = who.queue_owners(queue) if who else ()
    if who is None or not owners:
        return None
    names = [n for n in await who.owner_names(owners) if n != requester]
    teams = " or ".join(f"team {t}" for t in owners)
    return (
        f"Queue {queue} is owned by {teams}: one approval must come from an owner "
        f"({', '.join(names) or 'nobody holds it now'})."
    )


async def owner_basis(
    conn: AsyncConnection,
    who: Eligibility | None,
    request: RequestRow,
    standing: ApproverStanding,
    approved: int,
) -> dict[str, Any]:
    """What an approval rests on, for its row and its audit event; refused
    (``OwnerApprovalNeeded``) when, on an owned queue no owner has approved, it would be
    the last approval the request needs without being an owner's."""
    owners = who.queue_owners(request.queue) if who else ()
    owner_of = sorted(set(owners) & standing.teams)
    completes = approved + 1 >= request.approvals_required
    if owners and not owner_of and completes and not await store.owner_approved(conn, request.id):
        raise OwnerApprovalNeeded(number=request.id, queue=str(request.queue), teams=owners)
    basis: dict[str, Any] = {"grounds": list(standing.grounds)}
    if owner_of:
        basis["owner_of"] = owner_of
    return basis
