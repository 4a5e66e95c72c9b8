"""Who is on call now, as ``/queue oncall``, ``/incident whois`` and ``queuebot config
check`` say it: each rota's holders, each team's and role grant's sources and members, and
how fresh each read is. Asked of ``services.access.Standings`` (the same cache and the
same reads a command's authorization rests on), so what is shown is what would be granted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from services.access import STALE_FOR, Holders, Source, SourceUnavailable, Standings
from services.access.standing import rota_source
from services.config import GroupsConfig, rota_key


@dataclass(frozen=True)
class GroupNow:
    """Who a team or a role grant names now: ``names`` from every source read, ``stale``
    one line per source answered from its last read, ``unread`` one line per source that
    could not be read (nothing from it is counted)."""

    name: str
    sources: tuple[str, ...]
    names: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()


def utc(value: datetime) -> str:
    """A moment as replies say it: in UTC, whatever zone the config gave it in."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def group_sources(group: GroupsConfig) -> tuple[str, ...]:
    """Where a group's members come from, as a person finds each in the config."""
    found = [f"[people] {', '.join(group.people)}"] if group.people else []
    found += [Source("slack_usergroup", s).label() for s in group.slack_usergroups]
    found += [Source("discord_role", r).label() for r in group.discord_roles]
    found += [f"rota {r}" for r in group.rotas]
    return tuple(found)


def stale_line(source: str, read_at: datetime | None) -> str:
    at = f"{read_at.astimezone(UTC):%H:%M:%S} UTC" if read_at else "its last read"
    minutes = int(STALE_FOR.total_seconds() // 60)
    return (
        f"{source} is not answering: its members as read at {at} are shown, and used "
        f"for at most {minutes} minutes after that read"
    )


async def rotas_now(standings: Standings) -> list[Holders]:
    """Every rota's holders now, in the config's order."""
    found = []
    for name, _ in standings.rotas.values():
        held = await standings.holders(name)
        assert held is not None  # a configured rota
        found.append(held)
    return found


async def group_now(
    standings: Standings,
    name: str,
    group: GroupsConfig,
    *,
    unreadable: Callable[[Source], str | None] | None = None,
) -> GroupNow:
    """Everyone ``group`` names now, and how each source was read. ``unreadable`` says
    why a source is not to be read at all (``config check`` without a platform's token);
    such a source is left out and said, as one that failed is."""
    names: dict[str, None] = dict.fromkeys(group.people)
    stale: list[str] = []
    unread: list[str] = []
    for rota in group.rotas:
        found = standings.rota(rota)
        source = rota_source(found[1]) if found else None
        why = unreadable(source) if unreadable and source else None
        if source is not None and why is not None:
            unread.append(f"rota {rota}: {source.label()} {why}")
            continue
        held = await standings.holders(rota)
        if held is None:
            continue  # refused by config loading; never here
        if held.unavailable:
            unread.append(held.unavailable)
            continue
        if held.stale:
            stale.append(stale_line(held.source, held.read_at))
        names.update(dict.fromkeys(held.now))
    sources = [Source("slack_usergroup", s) for s in group.slack_usergroups]
    sources += [Source("discord_role", r) for r in group.discord_roles]
    for source in sources:
        why = unreadable(source) if unreadable else None
        if why is not None:
            unread.append(f"{source.label()} {why}")
            continue
        try:
            read = await standings.membership.read(source)
        except SourceUnavailable as exc:
            unread.append(exc.message)
            continue
        if read.stale:
            stale.append(stale_line(source.label(), read.read_at))
        names.update(
            dict.fromkeys(sorted(standings.name_of(source.platform, a) for a in read.members))
        )
    return GroupNow(name, group_sources(group), tuple(names), tuple(stale), tuple(unread))


async def owners_now(standings: Standings) -> list[tuple[str, list[GroupNow]]]:
    """Each owned queue, in the config's order, with its owner teams now."""
    found = []
    for queue, teams in standings.owners.items():
        if teams:
            found.append(
                (queue, [await group_now(standings, t, standings.teams[t]) for t in teams])
            )
    return found


def rota_gives(standings: Standings, rota: str) -> list[str]:
    """What holding ``rota`` gives besides the rota itself: the roles and teams that
    name it."""
    key = rota_key(rota)
    roles = [
        f"role {role}"
        for role, grant in standings.grants.items()
        if key in {rota_key(r) for r in grant.rotas}
    ]
    teams = [
        f"team {team}"
        for team, group in standings.teams.items()
        if key in {rota_key(r) for r in group.rotas}
    ]
    return roles + teams
