"""Authorization by person and role, checked for every command before its handler runs."""

from __future__ import annotations

from commands import messages
from commands.context import Invocation
from commands.spec import CommandSpec
from services.config import AccessConfig
from services.errors import PermissionDenied


def authorize(
    spec: CommandSpec, inv: Invocation, access: AccessConfig, *, shares: bool = False
) -> None:
    """Raise PermissionDenied unless the invocation's person may run ``spec``; posting
    the answer for the whole channel (``shares``) is for people listed under [people]."""
    if inv.person is None:
        if access.unknown_users == "deny":
            raise PermissionDenied(messages.unknown_user_denied(inv.platform, inv.account))
        if spec.role != "viewer":
            raise PermissionDenied(
                messages.unknown_user_read_only(inv.platform, inv.account, spec.path)
            )
        if shares:
            raise PermissionDenied(messages.unknown_user_share(inv.platform, inv.account))
        return
    if not inv.person.has(spec.role):
        raise PermissionDenied(messages.missing_role(inv.person, spec.path, spec.role))
