"""The words of who is on call: ``/queue oncall`` (every rota, and each owned queue's
teams) and ``/incident whois [ROTA]`` (every rota, or one in full). A source that could
not be read is said to be, never shown as nobody; one answered from its last read says
when that read was."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC

from commands.roster import GroupNow, stale_line, utc
from services.access import Holders
from services.errors import NotFound
from services.message import Block, Heading, Message, Table, Text

NO_ROTAS = (
    'No rotas are configured: add [rotas."rota:NAME"] with slack_usergroup = "S…" (a Slack '
    'user group), discord_role = "<role id>" (a Discord role) or schedule = { start, every, '
    "people } (a rotation queuebot keeps)."
)
NO_OWNERS = (
    'No queue has owners: [queues.NAME] owners = ["TEAM"] makes one approval of each '
    "change to that queue an owner's."
)
UNREAD = "not known (below)"


def unknown_rota(name: str, known: Sequence[str]) -> NotFound:
    if not known:
        return NotFound(f"no rota named {name!r}. {NO_ROTAS}")
    return NotFound(
        f"no rota named {name!r}; the rotas are: {', '.join(known)} "
        "(/incident whois lists who holds each)"
    )


def _now(held: Holders) -> str:
    if held.unavailable:
        return UNREAD
    if held.now:
        return ", ".join(held.now)
    if held.until is not None:
        return "nobody yet: the schedule has not started"
    return "nobody"


def _notes(held: Sequence[Holders]) -> list[Text]:
    lines = []
    for h in held:
        if h.unavailable:
            lines.append(f"{h.rota}: {h.unavailable}.")
        elif h.stale:
            lines.append(f"{h.rota}: {stale_line(h.source, h.read_at)}.")
    return [Text(line) for line in lines]


def rotas_blocks(held: Sequence[Holders]) -> list[Block]:
    """Every rota as one table row (who now, until when, who next, from where), then a
    line for each source not read or read stale."""
    if not held:
        return [Text(NO_ROTAS)]
    rows = tuple(
        (
            h.rota,
            _now(h),
            utc(h.until) if h.until else "-",
            h.next or "-",
            h.source,
        )
        for h in held
    )
    return [Table(("rota", "now", "until", "next", "source"), rows), *_notes(held)]


def _summary(held: Sequence[Holders]) -> str:
    return "; ".join(f"{h.rota}: {_now(h)}" for h in held) or "no rotas are configured"


def whois_message(held: Sequence[Holders]) -> Message:
    return Message(
        f"On call now: {_summary(held)}",
        (Heading(f"Rotas ({len(held)})"), *rotas_blocks(held)),
    )


def rota_message(held: Holders, gives: Sequence[str], declares: Sequence[str]) -> Message:
    """One rota in full: its source, who holds it now and, for a schedule, until when and
    who is next; what holding it gives."""
    source = held.source
    if held.read_at and held.until is None and not held.stale and not held.unavailable:
        source += f", read {held.read_at.astimezone(UTC):%H:%M:%S} UTC"
    lines = [f"source: {source}"]
    if held.unavailable:
        lines.append(f"now: not known: {held.unavailable}")
    elif held.until is not None:
        lines.append(f"now: {_now(held)}, until {utc(held.until)}")
        nxt = held.next or "nobody else (the schedule names one person)"
        lines.append(f"next: {nxt}, from {utc(held.until)}")
    else:
        lines.append(f"now: {_now(held)}")
        if held.stale:
            lines.append(stale_line(held.source, held.read_at))
    if gives:
        lines.append(f"holding it gives: {', '.join(gives)}")
    if declares:
        lines.append(f"whoever holds it may declare: {', '.join(declares)}")
    return Message(f"{held.rota}: {_now(held)}", (Heading(held.rota), Text("\n".join(lines))))


def _members(team: GroupNow) -> str:
    if not team.names:
        return UNREAD if team.unread else "nobody"
    shown = ", ".join(team.names)
    return f"{shown}; who else is not known (below)" if team.unread else shown


def owners_blocks(owned: Sequence[tuple[str, Sequence[GroupNow]]]) -> list[Block]:
    """Each owned queue's teams with their members now and where they come from."""
    if not owned:
        return [Text(NO_OWNERS)]
    rows = tuple(
        (queue, team.name, _members(team), "; ".join(team.sources))
        for queue, teams in owned
        for team in teams
    )
    notes = dict.fromkeys(
        f"team {team.name}: {line}."
        for _, teams in owned
        for team in teams
        for line in (*team.unread, *team.stale)
    )
    return [
        Text("One approval of each change to an owned queue must be an owner's."),
        Table(("queue", "owner team", "members now", "from"), rows),
        *(Text(n) for n in notes),
    ]


def oncall_message(
    held: Sequence[Holders], owned: Sequence[tuple[str, Sequence[GroupNow]]]
) -> Message:
    blocks: list[Block] = [Heading("On call now"), *rotas_blocks(held)]
    blocks += [Heading("Queue owners"), *owners_blocks(owned)]
    queues = ", ".join(q for q, _ in owned) or "none"
    return Message(f"On call now: {_summary(held)}. Owned queues: {queues}", tuple(blocks))
