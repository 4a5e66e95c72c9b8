"""Authorization by person and role, checked for every command before its handler runs."""

from __future__ import annotations

from collections.abc import Sequence

from commands import messages
from commands.context import Invocation
from commands.spec import CommandSpec
from services.config import AccessConfig
from services.errors import PermissionDenied


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
