"""Authorization by person and role, checked for every command before its handler runs."""

from __future__ import annotations

from collections.abc import Sequence

from commands import messages
from commands.context import Invocation
from commands.deps import Deps
from commands.spec import CommandSpec
from services.config import AccessConfig, rota_key
from services.errors import PermissionDenied
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


async def may_declare(runbook: Runbook, inv: Invocation, deps: Deps) -> None:
    """Raise PermissionDenied unless the person holds the runbook's declaration authority:
    the rota its authority names (by its role or its name, under [rotas]) when there is
    one, otherwise the queuebot role [roles] maps the authority to."""
    standings = deps.standings
    found = (
        standings.rota(runbook.declaration_role, runbook.declaration_name) if standings else None
    )
    if standings is not None and found is not None:
        name, _ = found
        if inv.person is not None and rota_key(name) in inv.person.rotas:
            return
        held = await standings.holders(name)
        raise PermissionDenied(
            f"only whoever holds {name} may declare {runbook.scenario_id}"
            f" ({messages.holders_words(held)}); ask them, or /incident whois {name}"
            + "".join(f" {n}." for n in (inv.person.notes if inv.person else ()))
        )
    role = queuebot_role(deps.roles, runbook.declaration_role)
    if role is None:
        raise PermissionDenied(
            f"nobody may declare {runbook.scenario_id} yet: neither [rotas] nor [roles] "
            f"names {runbook.declaration_role!r}; add "
            f'"{runbook.declaration_role}" = "duty-officer" under [roles], or a rota of that '
            "name under [rotas]"
        )
    if inv.person is None or not inv.person.has(role):
        if standings is not None:
            holders, _ = await standings.with_role(role)
        else:
            holders = [p.name for p in deps.directory.with_role(role)]
        who = ", ".join(holders) if holders else f"nobody has the {role} role yet"
        raise PermissionDenied(
            f"only the {runbook.declaration_role} may declare {runbook.scenario_id} "
            f"(queuebot role {role}: {who}); ask one of them, or /incident runbooks"
        )
