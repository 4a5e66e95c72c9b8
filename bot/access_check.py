"""What ``queuebot config check`` says of who may do what (docs/access.md): each rota's
source and who holds it now, read live where this process has a reader for the platform;
each role grant's and team's sources; each owned queue's teams. A rota or an owned
queue's teams with nobody in them now is a warning; a source that cannot be read is said
to be, with why, and never counted as nobody."""

from __future__ import annotations

from dataclasses import dataclass, field

from commands.roster import GroupNow, group_now, utc
from services.access import Holders, Source, Standings
from services.access.standing import rota_source
from services.config import Config, GroupsConfig, Role


@dataclass
class AccessReport:
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def not_readable(source: Source, config: Config, standings: Standings) -> str | None:
    """Why this process cannot read ``source`` (None: it has a reader for its platform)."""
    if source.platform in standings.membership.readers:
        return None
    env = config.env
    if source.platform == "slack":
        if env.slack_bot_token is None:
            return "cannot be read without SLACK_BOT_TOKEN"
    elif env.discord_bot_token is None:
        return "cannot be read without DISCORD_BOT_TOKEN"
    elif config.file.discord.guild is None:
        return "cannot be read without [discord] guild (the server whose roles are read)"
    return "not read by this check"


async def access_report(standings: Standings, config: Config) -> AccessReport:
    report = AccessReport()
    file = config.file
    if not (file.rotas or standings.grants or file.teams):
        report.lines.append(
            "access: [people] alone gives roles (no [rotas], [roles.ROLE] or [teams])"
        )
        return report
    report.lines.append(f"rotas: {len(file.rotas) or 'none'}")
    for name, rota in file.rotas.items():
        source = rota_source(rota)
        why = not_readable(source, config, standings) if source else None
        if source is not None and why is not None:
            report.lines.append(f"  {name}: {source.label()}: {why}")
            continue
        held = await standings.holders(name)
        assert held is not None
        report.lines.append(f"  {name}: {held.source}: {_holders(held)}")
        if not held.now and not held.unavailable:
            report.warnings.append(_nobody_on(held))
    for role, grant in standings.grants.items():
        group = await _group(standings, config, f"role {role}", grant)
        report.lines.append(f"role {role} also from: {_said(group)}")
    for team, members in file.teams.items():
        group = await _group(standings, config, f"team {team}", members)
        report.lines.append(f"team {team}: {_said(group)}")
        owns = [q for q, teams in standings.owners.items() if team in teams]
        if owns and not group.names and not group.unread:
            report.warnings.append(
                f"team {team} owns queue(s) {', '.join(owns)} and has nobody in it now: a "
                "change to them can be completed only once an owner approves"
            )
    for queue, teams in standings.owners.items():
        if teams:
            report.lines.append(
                f"queue {queue}: owned by {' or '.join(f'team {t}' for t in teams)} (the "
                "approval completing a change to it must be an owner's, unless an owner already "
                "approved)"
            )
    return report


async def role_holders(
    standings: Standings, config: Config, role: Role
) -> tuple[list[str], list[str]]:
    """Everyone holding ``role`` now (from [people] and its groups) and a line for each of
    its sources this check could not read."""
    names = [p.name for p in standings.directory.with_role(role)]
    grant = standings.grants.get(role)
    if grant is None:
        return names, []
    group = await _group(standings, config, f"role {role}", grant)
    return list(dict.fromkeys([*names, *group.names])), list(group.unread)


async def _group(standings: Standings, config: Config, name: str, group: GroupsConfig) -> GroupNow:
    """Who ``group`` names now, reading only what this process can read."""
    return await group_now(
        standings,
        name,
        group,
        unreadable=lambda source: not_readable(source, config, standings),
    )


def _holders(held: Holders) -> str:
    if held.unavailable:
        return held.unavailable
    now = ", ".join(held.now) or "nobody"
    if held.until is None:
        return f"{now} now"
    if not held.now:
        return f"nobody yet: the schedule starts {utc(held.until)}, {held.next} first"
    then = f", then {held.next}" if held.next else ""
    return f"{now} now, until {utc(held.until)}{then}"


def _nobody_on(held: Holders) -> str:
    if held.until is not None:
        return (
            f"rota {held.rota}: nobody holds it now: its schedule starts {utc(held.until)} "
            f"(first {held.next}); until then nothing it gives is held"
        )
    return (
        f"rota {held.rota}: nobody holds it now ({held.source} has no members): nothing it "
        "gives is held"
    )


def _said(group: GroupNow) -> str:
    sources = "; ".join(group.sources)
    now = ", ".join(group.names) or ("none read" if group.unread else "nobody")
    unread = f" (not read: {'; '.join(group.unread)})" if group.unread else ""
    return f"{sources}; now: {now}{unread}"
