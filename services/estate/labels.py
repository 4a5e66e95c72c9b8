"""The labels a status column's type takes, where the team's column is an enum.

On PostgreSQL, comparing an enum column with a value its type lacks is an error
(``invalid input value for enum``), not a comparison that matches nothing, and so is
writing one. A team whose status column is an enum of its own labels may lack values a
profile knows (``claimed``, ``done``, ``cancelled`` ...). So the bound table knows the
labels of each enum column (from the reflected type, which PostgreSQL's catalogue gives:
``pg_enum`` by the column's type), every status list that goes into SQL keeps only labels
the type has (a state with no label matches nothing), and a change that would write a
label the type lacks is refused, naming it. A column that is not an enum takes any value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql


@dataclass(frozen=True)
class Labels:
    """An enum column's type (its name) and the labels it takes."""

    type_name: str
    values: frozenset[str]

    def takes(self, values: Iterable[str]) -> list[str]:
        return [v for v in values if v in self.values]


def labels_of(column: sa.Column[Any]) -> Labels | None:
    """The labels of ``column``'s type where it is an enum (or a domain over one), else
    None: the column takes any value of its type."""
    kind: Any = column.type
    if isinstance(kind, postgresql.DOMAIN):
        kind = kind.data_type
    if isinstance(kind, sa.Enum) and kind.native_enum and kind.enums:
        name = str(kind.name or column.name)
        schema = getattr(kind, "schema", None)
        return Labels(f"{schema}.{name}" if schema else name, frozenset(kind.enums))
    return None


def takes(labels: Labels | None, values: Iterable[str]) -> list[str]:
    """``values`` a column with these labels takes, in their order (all where None)."""
    return list(values) if labels is None else labels.takes(values)


def lacking(labels: Labels | None, values: Iterable[str]) -> list[str]:
    """``values`` a column with these labels cannot hold, in their order."""
    return [] if labels is None else [v for v in values if v not in labels.values]


def lacking_note(labels: Labels, missing: list[str]) -> str:
    """What ``queuebot config check`` adds to a status column's line: the values it lacks."""
    return (
        f"its type {labels.type_name} has no {_either(missing)}, so "
        f"{'those statuses match' if len(missing) > 1 else 'that status matches'} nothing"
    )


def unwritable_label(labels: Labels, where: str, state: str, value: str) -> str:
    """Why a change that writes ``value`` (for ``state``) into ``where`` (table.column)
    cannot run, and the fix."""
    return (
        f"it writes {state} as {value!r}, a label the type {labels.type_name} of {where} "
        f"lacks; add it (ALTER TYPE {labels.type_name} ADD VALUE {value!r}) if your workers "
        "may see it: [queue.statuses] maps the values queuebot reads, it does not change "
        "the ones it writes"
    )


def _either(values: list[str]) -> str:
    quoted = [repr(v) for v in values]
    if len(quoted) == 1:
        return quoted[0]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"
