"""SQL identifiers that come from configuration are validated before any use."""

from __future__ import annotations

import re

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?\Z")


def validate_identifier(value: str) -> str:
    """Accept ``name`` or ``schema.name`` made of letters, digits and underscores."""
    if not _IDENT.match(value):
        raise ValueError(
            "expected a SQL identifier: letters, digits and '_', optionally 'schema.name', "
            "at most 63 characters per part"
        )
    return value


def quote_identifier(name: str) -> str:
    """``name`` or ``schema.name`` quoted for SQL text (names are validated first)."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def validate_role(value: str) -> str:
    """A role name: one identifier (letters, digits and '_'), never ``schema.name``."""
    if "." in value:
        raise ValueError("expected a role name: letters, digits and '_', no '.'")
    return validate_identifier(value)
