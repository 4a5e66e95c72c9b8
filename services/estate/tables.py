"""A profile's tables: what it declares of each (``TableSpec``) and each as reflected
from the team's database with the profile's logical column names resolved
(``BoundTable``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from services.estate.labels import Labels, labels_of, takes


@dataclass(frozen=True)
class TableSpec:
    """A table a profile uses: its role, its default name, the columns its reads and
    writes cannot do without (``required``) and the ones they use when present
    (``optional``: each with what its absence turns off). ``absent``, when set, makes the
    whole table optional and says what a queue without it goes without."""

    role: str
    default: str
    required: tuple[str, ...]
    optional: Mapping[str, str] = field(default_factory=dict)
    absent: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.required, *self.optional)


# (table role, short name, columns, optional (column, status values) filter, why)
IndexPlan = tuple[str, str, tuple[str, ...], tuple[str, tuple[str, ...]] | None, str]


class BoundTable:
    """A reflected table with the profile's logical column names resolved: the required
    ones and the optional ones the team's table has (``has``); ``missing`` names the
    optional ones it lacks."""

    def __init__(
        self,
        table: sa.Table,
        names: Mapping[str, str],
        dialect: str,
        missing: Sequence[str] = (),
    ) -> None:
        self.table = table
        self._names = dict(names)
        self.dialect = dialect
        self.missing = tuple(missing)

    def over(self, source: sa.FromClause) -> BoundTable:
        """The same columns read from ``source`` instead (a sample of the table, or a
        subquery giving its columns under the table's names): ``c`` then resolves there.
        Only for reads: a write needs the table itself."""
        return BoundTable(cast(sa.Table, source), self._names, self.dialect, self.missing)

    def has(self, logical: str) -> bool:
        """Whether the table has this column (always true of a required one)."""
        return logical in self._names

    def c(self, logical: str) -> sa.Column[Any]:
        try:
            return self.table.c[self._names[logical]]
        except KeyError:
            raise LookupError(
                f"{self.name} has no column {logical!r}: it is optional and absent here, "
                "so the caller must check has() first"
            ) from None

    def labels(self, logical: str) -> Labels | None:
        """The labels the column's type takes where it is an enum, else None (any value):
        a status list that goes into SQL keeps only these (``takes``)."""
        return labels_of(self.c(logical))

    def takes(self, logical: str, values: Iterable[str]) -> list[str]:
        """Of ``values``, those the column can hold: comparing an enum column with a label
        its type lacks is an error in PostgreSQL, not a comparison that matches nothing."""
        return takes(self.labels(logical), values)

    def isin(self, logical: str, values: Sequence[Any]) -> sa.ColumnElement[bool]:
        """``column IN (values)``; on PostgreSQL ``column = ANY(array)``: one parameter
        however many values, so ten thousand ids cost one bind, not ten thousand."""
        column = self.c(logical)
        if self.dialect != "postgresql":
            return column.in_(values)
        if isinstance(column.type, sa.Uuid):
            return column == sa.any_(text_array([str(v) for v in values], column.type))
        return column == sa.any_(sa.literal(list(values), postgresql.ARRAY(column.type)))

    @property
    def name(self) -> str:
        return self.table.fullname

    @property
    def used(self) -> tuple[str, ...]:
        """The table's own names of the columns queuebot reads (required and present)."""
        return tuple(self._names.values())


def text_array(texts: list[str], of: Any) -> sa.ColumnElement[Any]:
    """PostgreSQL: an array of ``of`` (a column's type) from texts, cast server-side. Sent
    as one comma-joined text the server splits where no text holds a comma: the driver
    then dumps one string instead of checking ten thousand elements for quoting."""
    if not any("," in t for t in texts):
        joined = sa.func.string_to_array(sa.literal(",".join(texts), sa.Text), ",")
        return sa.cast(joined, postgresql.ARRAY(of))
    return sa.cast(sa.literal(texts, postgresql.ARRAY(sa.Text)), postgresql.ARRAY(of))


UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
# Canonical uuid texts checked in one pass: joined by commas with every lowercase hex digit
# made "x" (and any "x" made "!", so that no other text can pass), a list of them is the
# shape below repeated.
_HEX_AS_X = str.maketrans({**dict.fromkeys("0123456789abcdef", "x"), "x": "!"})
_UUID_SHAPE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"


def uuid_texts(raws: list[str], coerce: Callable[[str], str]) -> list[str]:
    """Each id as the canonical text of a uuid: lowercased where that makes it one, else
    ``coerce``'s (which refuses what is no uuid). Ids read back from a table are canonical
    already: 100,000 of them are checked at once, not by a pattern each."""
    if ",".join(raws).translate(_HEX_AS_X) == ",".join([_UUID_SHAPE] * len(raws)):
        return raws
    out = []
    for raw in raws:
        lowered = raw.lower()
        if lowered == raw:
            lowered = raw  # the text already held, not a second copy of it
        out.append(lowered if UUID_TEXT.match(lowered) else coerce(raw))
    return out
