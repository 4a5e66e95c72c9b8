"""A person's standing for one command: their roles from [people] and from the groups
that grant roles (``[roles.ROLE]``), the teams (``[teams.NAME]``) and rotas (``[rotas]``)
they belong to now, each with its grounds; and who holds a rota or a team now.

Precedence is a union: a role given anywhere is held, and nothing takes one away but the
group's own membership. A source that cannot be read grants nothing (it is named in the
person's notes); one read stale grants for a while and says so (``Membership``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from services.access.membership import Membership, Read, SourceUnavailable
from services.access.schedule import shift
from services.access.sources import Source
from services.config import FileConfig, GroupsConfig, Role, RotaConfig, rota_key
from services.people import Directory, Grounds, Person


@dataclass(frozen=True)
class Who:
    """The acting account and what is known of it."""

    name: str
    platform: str
    slack: str | None
    discord: str | None
    # the Discord roles the interaction itself carried (None: not a Discord interaction)
    chat_roles: frozenset[str] | None = None


@dataclass
class _Found:
    grounds: list[Grounds] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Holders:
    """Who holds a rota now: names as queuebot knows them, the source, and for a
    schedule, until when and who is next."""

    rota: str
    source: str
    mention: str | None  # a group mention for posts; None for a schedule
    now: tuple[str, ...] = ()
    next: str | None = None
    until: datetime | None = None
    read_at: datetime | None = None
    stale: bool = False
    unavailable: str | None = None  # the one line naming the source, when unread


def rota_source(rota: RotaConfig) -> Source | None:
    if rota.slack_usergroup:
        return Source("slack_usergroup", rota.slack_usergroup)
    if rota.discord_role:
        return Source("discord_role", rota.discord_role)
    return None


class Standings:
    """Resolves standings and holders from the config, the people and the platforms."""

    def __init__(
        self,
        file: FileConfig,
        directory: Directory,
        membership: Membership,
        clock: Callable[[], datetime],
    ) -> None:
        self.directory = directory
        self.membership = membership
        self.clock = clock
        self.rotas = {rota_key(name): (name, cfg) for name, cfg in file.rotas.items()}
        self.grants = file.role_grants()
        self.teams = dict(file.teams)
        self.owners = {name: tuple(q.owners) for name, q in file.queue_map().items()}
        groups = [*self.grants.values(), *self.teams.values()]
        named = [Source("slack_usergroup", s) for g in groups for s in g.slack_usergroups]
        named += [Source("discord_role", r) for g in groups for r in g.discord_roles]
        named += [s for _, rota in self.rotas.values() if (s := rota_source(rota))]
        self.sources = tuple(dict.fromkeys(named))  # every group read for a standing

    # -- names -------------------------------------------------------------------------

    def names_anyone(self) -> bool:
        """Whether anyone could hold a role: [people], a role grant or a rota is configured
        (with nobody, no command can request a change, and nothing is checked of approvals)."""
        return bool(self.directory.names() or self.grants or self.rotas)

    def rota(self, *names: str) -> tuple[str, RotaConfig] | None:
        """The rota any of ``names`` (a runbook authority's role or name) resolves to."""
        for name in names:
            found = self.rotas.get(rota_key(name))
            if found is not None:
                return found
        return None

    def queue_owners(self, queue: str | None) -> tuple[str, ...]:
        return self.owners.get(queue or "", ())

    def name_of(self, platform: str, account: str) -> str:
        """A member read from a group, as queuebot names people: their [people] name, or
        ``platform:account`` for an account no [people] entry names."""
        person = self.directory.by_account(platform, account)
        return person.name if person else f"{platform}:{account}"

    # -- one person ----------------------------------------------------------------------

    async def standing(
        self,
        person: Person | None,
        *,
        platform: str,
        account: str,
        chat_roles: frozenset[str] | None = None,
    ) -> Person | None:
        """The person with every role, team and rota they hold now; an account no [people]
        entry names becomes a person only where a group names it."""
        who = Who(
            name=person.name if person else f"{platform}:{account}",
            platform=platform,
            slack=person.slack if person else (account if platform == "slack" else None),
            discord=person.discord if person else (account if platform == "discord" else None),
            chat_roles=chat_roles if platform == "discord" else None,
        )
        await self._read_at_once(who)
        found = _Found()
        if person is not None:
            found.grounds += [Grounds(f"role {r}", f"[people.{person.name}]") for r in person.roles]
        roles: set[Role] = set(person.roles) if person else set()
        for role, grant in self.grants.items():
            if role not in roles and await self._in(grant, who, f"role {role}", found):
                roles.add(role)
        teams = {
            name
            for name, team in self.teams.items()
            if await self._in(team, who, f"team {name}", found)
        }
        rotas = {key for key in self.rotas if await self._holds(key, who, found)}
        if person is None and not (roles or teams or rotas):
            return None
        base = person or Person(
            name=who.name,
            roles=frozenset(),
            slack=who.slack,
            discord=who.discord,
        )
        return replace(
            base,
            roles=frozenset(roles),
            teams=frozenset(teams),
            rotas=frozenset(rotas),
            grounds=tuple(found.grounds),
            notes=tuple(dict.fromkeys(found.notes)),
        )

    async def _read_at_once(self, who: Who) -> None:
        """Read side by side every group that could name this person and is not kept
        fresh: the command that pays for the minute's reads waits for the slowest, not
        the sum (what each read found is then taken from the cache)."""
        wanted = [
            s
            for s in self.sources
            if (s.platform == "slack" and who.slack)
            or (s.platform == "discord" and who.discord and who.chat_roles is None)
        ]
        if len(wanted) > 1:
            await asyncio.gather(*(self.membership.read(s) for s in wanted), return_exceptions=True)

    async def _in(self, g: GroupsConfig, who: Who, gives: str, found: _Found) -> bool:
        if who.name in g.people:
            found.grounds.append(Grounds(gives, f"[people] of {gives}"))
            return True
        for role_id in g.discord_roles:
            if await self._member(Source("discord_role", role_id), who, gives, found):
                return True
        for rota in g.rotas:
            if await self._holds(rota_key(rota), who, found, gives=gives):
                return True
        for group in g.slack_usergroups:
            if await self._member(Source("slack_usergroup", group), who, gives, found):
                return True
        return False

    async def _holds(self, key: str, who: Who, found: _Found, *, gives: str = "") -> bool:
        name, rota = self.rotas[key]
        gives = gives or f"rota {name}"
        if rota.schedule is not None:
            now = self.clock()
            on = shift(rota.schedule, now)
            if on.primary == who.name:
                until = f"{on.until.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
                said = f"schedule of {name}, on shift until {until}"
                found.grounds.append(Grounds(gives, said, now))
                return True
            return False
        source = rota_source(rota)
        assert source is not None  # a rota has exactly one source
        return await self._member(source, who, gives, found, via=name)

    async def _member(
        self, source: Source, who: Who, gives: str, found: _Found, *, via: str | None = None
    ) -> bool:
        where = f"{source.label()} (rota {via})" if via else source.label()
        if source.kind == "discord_role" and who.chat_roles is not None:
            if source.id in who.chat_roles:  # the interaction itself says so, fresh
                found.grounds.append(
                    Grounds(gives, f"{where}, as the interaction carried it", self.clock())
                )
                return True
            return False
        account = who.slack if source.kind == "slack_usergroup" else who.discord
        if account is None:
            return False  # no account there: the group cannot name this person
        try:
            read = await self.membership.read(source)
        except SourceUnavailable as exc:
            found.notes.append(exc.message)
            return False
        if read.stale:  # a grant or a refusal resting on it: either way, said
            found.notes.append(_stale_note(read, self.membership.stale_for))
        if account not in read.members:
            return False
        found.grounds.append(Grounds(gives, where, read.read_at, read.stale))
        return True

    # -- who holds what -----------------------------------------------------------------

    async def holders(self, key_or_name: str) -> Holders | None:
        """Who holds a rota now (None: no such rota)."""
        found = self.rota(key_or_name)
        if found is None:
            return None
        name, rota = found
        if rota.schedule is not None:
            on = shift(rota.schedule, self.clock())
            return Holders(
                rota=name,
                source=f"schedule ({', '.join(rota.schedule.people)}, every "
                f"{_period(rota.schedule.every.total_seconds())})",
                mention=None,
                now=(on.primary,) if on.primary else (),
                next=on.secondary,
                until=on.until,
                read_at=self.clock(),
            )
        source = rota_source(rota)
        assert source is not None
        try:
            read = await self.membership.read(source)
        except SourceUnavailable as exc:
            return Holders(name, source.label(), source.mention(), unavailable=exc.message)
        return Holders(
            rota=name,
            source=source.label(),
            mention=source.mention(),
            now=tuple(sorted(self.name_of(source.platform, a) for a in read.members)),
            read_at=read.read_at,
            stale=read.stale,
        )

    async def members(self, g: GroupsConfig) -> tuple[list[str], list[str]]:
        """Everyone a group names now, by name, and the lines of sources not read."""
        names: dict[str, None] = dict.fromkeys(g.people)
        unread: list[str] = []
        sources = [Source("slack_usergroup", s) for s in g.slack_usergroups]
        sources += [Source("discord_role", r) for r in g.discord_roles]
        for rota in g.rotas:
            held = await self.holders(rota)
            if held is None:
                continue
            if held.unavailable:
                unread.append(held.unavailable)
            names.update(dict.fromkeys(held.now))
        for source in sources:
            try:
                read = await self.membership.read(source)
            except SourceUnavailable as exc:
                unread.append(exc.message)
                continue
            names.update(
                dict.fromkeys(sorted(self.name_of(source.platform, a) for a in read.members))
            )
        return list(names), unread

    async def with_role(self, role: Role) -> tuple[list[str], list[str]]:
        """Everyone holding ``role`` now, by name (from [people] and the role's groups),
        and the lines of the sources that could not be read."""
        names = [p.name for p in self.directory.with_role(role)]
        grant = self.grants.get(role)
        if grant is None:
            return names, []
        more, unread = await self.members(grant)
        return list(dict.fromkeys([*names, *more])), unread

    async def team_members(self, team: str) -> tuple[list[str], list[str]]:
        return await self.members(self.teams[team])

    # -- the change-request hub's questions (services/changes/eligible.py) --------------

    async def approver_names(self) -> list[str] | None:
        """Everyone holding the approver role now; None when a source of it could not be
        read (a request is then not refused as one nobody could approve)."""
        names, unread = await self.with_role("approver")
        return None if unread else names

    async def owner_names(self, teams: Sequence[str]) -> list[str]:
        out: dict[str, None] = {}
        for team in teams:
            if team in self.teams:
                names, _ = await self.team_members(team)
                out.update(dict.fromkeys(names))
        return list(out)


def _stale_note(read: Read, stale_for: timedelta) -> str:
    minutes = f"{stale_for.total_seconds() / 60:g}"
    return (
        f"{read.source.label()} did not answer ({read.failure}): its members as read at "
        f"{read.read_at:%H:%M:%S} UTC are used, for at most {minutes} minutes after that read"
    )


def _period(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86400)
    if rest == 0:
        return f"{days // 7} week{'s' if days // 7 != 1 else ''}" if days % 7 == 0 else f"{days} d"
    return f"{int(seconds // 3600)} h"
