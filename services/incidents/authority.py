"""Whom an incident's posts call: its lead, by their mention on each platform (by name
elsewhere), and at a missed deadline the declaration authority's secondary: for a rota
kept as a schedule, the next one on shift; for a rota kept as a Slack user group or a
Discord role, that group's own mention. Never a whole channel.

The declaration authority is the rota its runbook names under ``[rotas]`` (by the
authority's role or its name) when there is one, else the queuebot role ``[roles]`` maps
it to; who holds it is asked of ``services/access`` each time (a rota changes hands)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.access import Standings
from services.config import Role
from services.incidents.model import IncidentView, Lead
from services.message import Mention
from services.people import Directory
from services.runbooks import Runbook, queuebot_role


@dataclass(frozen=True)
class Held:
    """A runbook's declaration authority as held now."""

    names: tuple[str, ...] = ()  # who holds it now, by name
    # whom an escalation calls besides the lead (None: nobody more, as for a [roles] role)
    secondary: Mention | None = None
    secondary_words: str = ""  # the secondary as a post names them


class Authority:
    """Who holds each runbook's declaration authority, and how to call people."""

    def __init__(
        self,
        *,
        directory: Directory,
        roles: Mapping[str, Role],
        standings: Standings | None = None,
    ) -> None:
        """``roles``: ``[roles]``, the runbooks' names for queuebot roles; ``standings``:
        rotas, roles and teams from groups (None: ``[people]`` alone decides)."""
        self.directory = directory
        self.roles = dict(roles)
        self.standings = standings

    async def held(self, runbook: Runbook) -> Held:
        standings = self.standings
        found = (
            standings.rota(runbook.declaration_role, runbook.declaration_name)
            if standings is not None
            else None
        )
        if standings is not None and found is not None:
            name, rota = found
            holders = await standings.holders(name)
            names = holders.now if holders is not None else ()
            if rota.schedule is not None:
                following = holders.next if holders is not None else None
                if following is None:
                    return Held(names)
                return Held(names, self.person(following), f"{following}, next on shift of {name}")
            group = Mention(name, slack=rota.slack_usergroup, discord=rota.discord_role, group=True)
            where = holders.source if holders is not None else "its group"
            return Held(names, group, f"{name} ({where})")
        role = queuebot_role(self.roles, runbook.declaration_role)
        if role is None:
            return Held()
        if standings is not None:
            holding, _ = await standings.with_role(role)
            return Held(tuple(holding))
        return Held(tuple(p.name for p in self.directory.with_role(role)))

    def person(self, name: str) -> Mention:
        """A person by name: their accounts as ``[people]`` gives them."""
        known = self.directory.by_name(name)
        if known is None:
            return Mention(name)
        return Mention(name, slack=known.slack, discord=known.discord)

    def lead(self, view: IncidentView) -> Mention | None:
        """The incident's lead: their ``[people]`` accounts, and the account they lead from."""
        return self.of(Lead.of(view))

    def of(self, lead: Lead) -> Mention | None:
        if not lead.known:
            return None
        known = self.directory.by_name(lead.name) if lead.name else None
        slack = known.slack if known is not None else None
        discord = known.discord if known is not None else None
        if lead.platform == "slack" and lead.account:
            slack = slack or lead.account
        if lead.platform == "discord" and lead.account:
            discord = discord or lead.account
        return Mention(lead.shown(), slack=slack, discord=discord)


def called(*mentions: Mention | None) -> tuple[Mention, ...]:
    """The mentions given, each person or group once."""
    out: dict[tuple[str, bool], Mention] = {}
    for mention in mentions:
        if mention is not None:
            out.setdefault((mention.name, mention.group), mention)
    return tuple(out.values())
