"""A privilege the database refused, in one line naming the GRANT that gives it: a
change approved while the role queuebot connects as lacks UPDATE on a queue table is
this line, not a traceback (``services.db.transaction`` raises it)."""

from __future__ import annotations

import re

from services.errors import ConfigError

INSUFFICIENT_PRIVILEGE = "42501"  # PostgreSQL's SQLSTATE
_DENIED = re.compile(r"permission denied for (table|relation|sequence|view) (\S+)")


class PrivilegeMissing(ConfigError):
    """The database refused a statement for want of a privilege; nothing was changed."""


def _privilege(statement: str) -> str:
    """The privilege a statement needs: ``SELECT ... FOR UPDATE`` needs UPDATE."""
    words = statement.lstrip().upper()
    for verb in ("UPDATE", "INSERT", "DELETE"):
        if words.startswith(verb):
            return verb
    return "UPDATE" if "FOR UPDATE" in words or "FOR NO KEY UPDATE" in words else "SELECT"


def refused(
    *, sqlstate: str | None, said: str, statement: str | None, role: str | None, subject: str
) -> PrivilegeMissing | None:
    """The one line for a refused privilege, or None when the failure is another."""
    if sqlstate != INSUFFICIENT_PRIVILEGE:
        return None
    denied = _DENIED.search(said)
    who = repr(role) if role else "queuebot's role"
    grantee = role or "<role>"
    if denied is None:
        return PrivilegeMissing(
            f"nothing was changed ({subject}): {said}: {who} lacks a privilege; "
            "`queuebot config check` lists every privilege the configured queues need"
        )
    kind, name = denied.groups()
    if kind == "sequence":
        privilege, on = "USAGE", f"SEQUENCE {name}"
    else:
        privilege, on = _privilege(statement or ""), name
    if name.rpartition(".")[2].strip('"').startswith(("qb_", "alembic_version")):
        fix = f"`queuebot db grant {grantee} --apply`, run as the owner of queuebot's tables"
        return PrivilegeMissing(
            f"nothing was changed ({subject}): {said}: role {who} lacks the {privilege} "
            f"privilege on queuebot's own table; {fix}, gives every privilege it needs"
        )
    return PrivilegeMissing(
        f"nothing was changed ({subject}): {said}: role {who} lacks the {privilege} privilege "
        f"on it; its owner grants it (GRANT {privilege} ON {on} TO {grantee}); "
        "`queuebot config check` lists every privilege the configured queues need"
    )
