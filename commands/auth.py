"""Authorization by person and role, checked for every command before its handler runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commands import messages
from commands.context import Invocation
from commands.deps import Deps
from commands.spec import CommandSpec
from services.config import AccessConfig, rota_key
from services.errors import PermissionDenied
from services.people import Person
from services.runbooks import Runbook, queuebot_role


def authorize(
    spec: CommandSpec,
    inv: Invocation,
    access: AccessConfig,
    *,
    shares: bool = False,
    people: Sequence[str] = (),
    config_file: str | None = None,
) -> None:
    """Raise PermissionDenied unless the invocation's person may run ``spec``; posting
    the answer for the whole channel (``shares``) is for people listed under [people].
    A refusal of an unknown user says how to become known: in the console, act as one of
    ``people`` (from ``config_file``); elsewhere, ask an admin."""
    if inv.person is None:
        join = messages.how_to_be_known(inv.platform, inv.account, people, config_file)
        if access.unknown_users == "deny":
            raise PermissionDenied(messages.unknown_user_denied(inv.platform, inv.account, join))
        if not spec.read_only:
            raise PermissionDenied(
                messages.unknown_user_read_only(inv.platform, inv.account, spec.path, join)
            )
        if shares:
            raise PermissionDenied(messages.unknown_user_share(inv.platform, inv.account, join))
        return
    if not inv.person.has(spec.role):
        raise PermissionDenied(messages.missing_role(inv.person, spec.path, spec.role))


@dataclass(frozen=True)
class Refusal:
    """Why a person does not hold a runbook's declaration authority, and who does."""

    authority: str  # "rota:prod-ops", or the runbook's role ("operations duty officer")
    who: str  # who holds it now, in a few words
    unmapped: bool = False  # neither [rotas] nor [roles] names it: nobody holds it
    rota: bool = False  # the authority is a rota (/incident whois names its holders)
    notes: tuple[str, ...] = ()  # sources read stale or not read, from the person's standing

    def words(self, act: str, hint: str) -> str:
        """The refusal of ``act`` ("declare gd:queue-loss", "lead INC-3") in one line,
        with what to do (``hint``) where somebody holds the authority."""
        if self.unmapped:
            return (
                f"nobody may {act} yet: neither [rotas] nor [roles] names {self.authority!r}; "
                f'add "{self.authority}" = "duty-officer" under [roles], or a rota of that '
                "name under [rotas]"
            )
        if self.rota:
            return f"only whoever holds {self.authority} may {act} ({self.who}); {hint}" + "".join(
                f" {n}." for n in self.notes
            )
        return f"only the {self.authority} may {act} ({self.who}); {hint}"


def holds_declaration(runbook: Runbook, person: Person | None, deps: Deps) -> bool:
    """Whether ``person`` (a standing as ``services/access`` resolves it, or None for
    nobody known) holds the runbook's declaration authority: the rota its authority names
    (by its role or its name, under [rotas]) when there is one, otherwise the queuebot
    role [roles] maps the authority to. Read from the standing alone: no group is read."""
    standings = deps.standings
    found = (
        standings.rota(runbook.declaration_role, runbook.declaration_name) if standings else None
    )
    if found is not None:
        return person is not None and rota_key(found[0]) in person.rotas
    role = queuebot_role(deps.roles, runbook.declaration_role)
    return role is not None and person is not None and person.has(role)


async def declaration_refusal(
    runbook: Runbook, person: Person | None, deps: Deps
) -> Refusal | None:
    """None where ``person`` holds the runbook's declaration authority
    (``holds_declaration``); else why not, and who does hold it."""
    if holds_declaration(runbook, person, deps):
        return None
    standings = deps.standings
    found = (
        standings.rota(runbook.declaration_role, runbook.declaration_name) if standings else None
    )
    if standings is not None and found is not None:
        name, _ = found
        held = await standings.holders(name)
        notes = person.notes if person else ()
        return Refusal(name, messages.holders_words(held), rota=True, notes=notes)
    role = queuebot_role(deps.roles, runbook.declaration_role)
    if role is None:
        return Refusal(runbook.declaration_role, "", unmapped=True)
    if standings is not None:
        holders, _ = await standings.with_role(role)
    else:
        holders = [p.name for p in deps.directory.with_role(role)]
    who = ", ".join(holders) if holders else f"nobody has the {role} role yet"
    return Refusal(runbook.declaration_role, f"queuebot role {role}: {who}")


async def may_declare(runbook: Runbook, inv: Invocation, deps: Deps) -> None:
    """Raise PermissionDenied unless the person holds the runbook's declaration authority."""
    refusal = await declaration_refusal(runbook, inv.person, deps)
    if refusal is None:
        return
    hint = (
        f"ask them, or /incident whois {refusal.authority}"
        if refusal.rota
        else "ask one of them, or /incident runbooks"
    )
    raise PermissionDenied(refusal.words(f"declare {runbook.scenario_id}", hint))
