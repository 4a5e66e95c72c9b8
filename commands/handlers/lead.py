"""``/incident lead PERSON``: hand an incident's lead over.

The lead hands it over, or PERSON takes it themself; an incident whose lead is not known
may be handed by anyone holding its runbook's declaration authority. PERSON must hold
that authority now (their standing as ``services/access`` reads it, or [people] alone
without it), by the same rule declaring follows (``commands.auth``). Each refusal says
in one line why, and who could."""

from __future__ import annotations

import re
from dataclasses import dataclass

from commands.auth import declaration_refusal
from commands.context import Invocation
from commands.deps import Deps
from commands.handlers.changes import actor_of
from commands.handlers.incidents import _service, _which
from commands.model import HandLead
from commands.reply import Reply
from services.errors import Conflict, NotFound, PermissionDenied
from services.incidents.model import Lead
from services.message import Message, Text
from services.people import Person

_SLACK_MENTION = re.compile(r"^<@([UW][A-Z0-9]{2,20})(?:\|[^<>]*)?>\Z")
_DISCORD_MENTION = re.compile(r"^<@!?([0-9]{15,21})>\Z")
_SLACK_USER = re.compile(r"^(?:slack:)?([UW][A-Z0-9]{8,20})\Z")  # as queuebot names one
_DISCORD_USER = re.compile(r"^(?:discord:)?([0-9]{15,21})\Z")


@dataclass(frozen=True)
class Named:
    """The person a command names: who would lead, and their [people] entry if any."""

    lead: Lead
    person: Person | None

    @property
    def shown(self) -> str:
        return self.lead.shown()


def account_of(person: Person, platform: str) -> tuple[str, str]:
    """Where a [people] person would lead from: their account on the platform the
    command came from, else on Slack, else on Discord, else by name at the console."""
    accounts = {"slack": person.slack, "discord": person.discord}
    if accounts.get(platform):
        return platform, str(accounts[platform])
    for where, account in accounts.items():
        if account:
            return where, account
    return "console", person.name


def named(text: str, inv: Invocation, deps: Deps) -> Named:
    """PERSON as typed: a [people] name (``bob``, ``@bob``), a Slack mention or user id,
    or a Discord mention or user id (``slack:U…``, ``discord:…`` as queuebot names an
    account no [people] entry names)."""
    person = deps.directory.by_name(text.removeprefix("@"))
    if person is not None:
        platform, account = account_of(person, inv.platform)
        return Named(Lead(person.name, platform, account), person)
    for platform, pattern in (
        ("slack", _SLACK_MENTION),
        ("discord", _DISCORD_MENTION),
        ("slack", _SLACK_USER),
        ("discord", _DISCORD_USER),
    ):
        found = pattern.match(text)
        if found is not None:
            account = found.group(1)
            person = deps.directory.by_account(platform, account)
            name = person.name if person is not None else f"{platform}:{account}"
            return Named(Lead(name, platform, account), person)
    names = ", ".join(deps.directory.names()) or "nobody yet"
    raise NotFound(
        f"nobody is named {text!r} under [people] ({names}); name one of them, or mention "
        "the person (@name on Slack or Discord)"
    )


async def standing_of(target: Named, deps: Deps) -> Person | None:
    """The person as they stand now: [people] and the groups that grant roles and rotas."""
    if deps.standings is None:
        return target.person
    return await deps.standings.standing(
        target.person,
        platform=str(target.lead.platform),
        account=str(target.lead.account),
    )


async def handle_lead(cmd: HandLead, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    view = await _which(cmd, incidents)
    if view.state != "open":
        raise Conflict(f"{view.name} is resolved: its lead stays as the postmortem records it")
    target = named(cmd.person, inv, deps)
    current = Lead.of(view)
    if current.known and current.same(target.lead):
        raise Conflict(f"{target.shown} already leads {view.name}")
    assert deps.runbooks is not None  # _service refuses a process without runbooks
    runbook = deps.runbooks.get(view.scenario)
    # first whether PERSON may lead at all, then whether this person may make them
    standing = await standing_of(target, deps)
    refusal = await declaration_refusal(runbook, standing, deps)
    if refusal is not None:
        raise PermissionDenied(
            f"{target.shown} cannot lead {view.name}: "
            + refusal.words(f"lead {view.name}", "hand it to one of them")
        )
    acting = Lead(inv.person.name if inv.person else None, inv.platform, inv.account)
    takes = acting.same(target.lead)
    if current.known and not takes and not acting.same(current):
        raise PermissionDenied(
            f"only {current.shown()}, who leads {view.name}, may hand its lead over, or "
            f"{target.shown} may take it: ask {current.shown()}, or {target.shown} types "
            f"/incident lead {target.shown} --incident {view.name}"
        )
    if not current.known and not takes:
        refusal = await declaration_refusal(runbook, inv.person, deps)
        if refusal is not None:
            raise PermissionDenied(
                f"{view.name} has no known lead: "
                + refusal.words("hand its lead over", f"or {target.shown} may take it")
            )
    after = await incidents.hand_over(
        number=view.number,
        to=target.lead,
        expected=current,
        actor=actor_of(inv),
        basis=standing.basis() if standing is not None else (),
    )
    said = (
        f"{after.name} is led by {target.shown} now (before: {current.shown()}); its "
        "reminders and escalations call them. The handoff is on its timeline."
    )
    return Reply(Message(f"{after.name}: {target.shown} leads", (Text(said),)), ephemeral=False)
