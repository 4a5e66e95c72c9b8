"""People and their roles. Approval rules are about people, not chat accounts: the
two-person rule holds across every platform."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.config import ROLES, FileConfig, Role


@dataclass(frozen=True)
class Grounds:
    """One fact a person's standing rests on: what it gives (``role approver``, ``team
    billing``, ``rota rota:prod-ops``), where it was read, when, and whether that read
    is stale (the source did not answer since)."""

    gives: str
    source: str
    read_at: datetime | None = None
    stale: bool = False

    def jsonable(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gives": self.gives, "source": self.source}
        if self.read_at is not None:
            out["read_at"] = self.read_at.isoformat()
        if self.stale:
            out["stale"] = True
        return out


@dataclass(frozen=True)
class Person:
    """A person as queuebot knows them at one moment: their roles from [people] and from
    the groups that grant roles, the teams and rotas they belong to now, and the grounds
    of each (``services/access`` fills those in for every command)."""

    name: str
    roles: frozenset[Role]
    slack: str | None = None
    discord: str | None = None
    teams: frozenset[str] = frozenset()
    rotas: frozenset[str] = frozenset()  # rota keys (``rota_key``) held now
    grounds: tuple[Grounds, ...] = ()
    # lines to say: a source read stale, or not read at all (nothing granted from it)
    notes: tuple[str, ...] = ()

    def basis(self) -> list[dict[str, Any]]:
        """What a decision of theirs rests on, for its audit event."""
        return [g.jsonable() for g in self.grounds]

    def has(self, role: Role) -> bool:
        return role == "viewer" or role in self.roles

    def role_list(self) -> str:
        return ", ".join(r for r in ROLES if self.has(r))


class Directory:
    """Looks people up by name or by a platform account."""

    def __init__(self, people: list[Person]) -> None:
        self._by_name = {p.name: p for p in people}
        self._by_account: dict[tuple[str, str], Person] = {}
        for p in people:
            if p.slack:
                self._by_account[("slack", p.slack)] = p
            if p.discord:
                self._by_account[("discord", p.discord)] = p

    @classmethod
    def from_config(cls, file: FileConfig) -> Directory:
        return cls(
            [
                Person(name=name, roles=frozenset(cfg.roles), slack=cfg.slack, discord=cfg.discord)
                for name, cfg in file.people.items()
            ]
        )

    def by_name(self, name: str) -> Person | None:
        return self._by_name.get(name)

    def by_account(self, platform: str, account: str) -> Person | None:
        return self._by_account.get((platform, account))

    def names(self) -> list[str]:
        return list(self._by_name)

    def with_role(self, role: Role) -> list[Person]:
        return [p for p in self._by_name.values() if p.has(role)]
