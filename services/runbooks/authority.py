"""Which queuebot role holds a runbook's authority: ``[roles]`` maps the names runbooks
use ("operations duty officer") to queuebot's roles ("duty-officer"). Names compare
without regard to case or to how many spaces separate their words."""

from __future__ import annotations

from collections.abc import Mapping

from services.config import Role


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


def queuebot_role(roles: Mapping[str, Role], authority: str) -> Role | None:
    """The queuebot role ``[roles]`` maps ``authority`` to, or None when it is unmapped."""
    wanted = _key(authority)
    return next((role for name, role in roles.items() if _key(name) == wanted), None)
