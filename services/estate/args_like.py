"""``--args-like TEXT``: jobs whose arguments (the payload a job was enqueued with) hold
TEXT, case-insensitively, as the database prints them (a JSON column as its JSON text).

One definition for every profile: the match (``where``), the lookup ``/queue show
--args-like`` makes (``look_up``: a capped scan, since no index answers a substring of a
payload) and the excerpt of each match it lists. A profile says where a job's arguments
are kept (``QueueProfile.args_lookup``, which ``args_where`` reads for ``dead_where``);
where it keeps none, the option is refused, never ignored: a redrive that ignored it would
take every dead letter.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import UsageError
from services.estate.model import CanonicalState

MIN_TEXT = 2  # one character matches nearly every job's arguments
MAX_TEXT = 200
SHOWN = 10  # the matches /queue show lists when there are several
COUNTED = 1000  # how far it counts them before it says "at least"
# LIKE's escape character: the user's % _ and / are escaped with it. Not a backslash, whose
# meaning in a literal depends on PostgreSQL's standard_conforming_strings.
ESCAPE = "/"
EXCERPT = 36  # characters shown on each side of a match

NO_ARGS = (
    "this queue's profile keeps no job arguments (no payload column bound); --args-like "
    "needs one — see docs/profiles.md"
)


# What a profile's optional payload column's absence turns off (config check says it).
ABSENT = "no job arguments: --args-like (/queue dlq, /queue redrive, /queue show) is refused"


def problem(text: str) -> str | None:
    """Why ``text`` cannot be searched for, or None, said of --args-like (the command's
    refusal names the option before it: "--args-like: needs ...")."""
    n = len(text.strip())
    if n < MIN_TEXT:
        return (
            f"needs at least {MIN_TEXT} characters (one character matches nearly every "
            "job's arguments); give a distinctive part, e.g. --args-like INV-104857"
        )
    if n > MAX_TEXT:
        return (
            f"takes at most {MAX_TEXT} characters, not {n:,}; give a distinctive part of "
            "the arguments, e.g. an invoice or order number"
        )
    return None


def pattern(text: str) -> str:
    """The LIKE pattern that finds ``text`` anywhere, its % _ and / matching themselves."""
    escaped = text.replace(ESCAPE, ESCAPE * 2).replace("%", ESCAPE + "%")
    return "%" + escaped.replace("_", ESCAPE + "_") + "%"


def as_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """A job's arguments as text: JSON as its JSON text, text as it is."""
    return sa.cast(column, sa.Text)


def where(
    queue: str, column: sa.ColumnElement[Any] | None, text: str, *, absent: str = NO_ARGS
) -> sa.ColumnElement[bool]:
    """The jobs whose arguments hold ``text``: ``CAST(col AS text) ILIKE :pattern`` on
    PostgreSQL, ``lower(CAST(col AS TEXT)) LIKE lower(:pattern)`` on SQLite (case-insensitive
    for ASCII letters there), the pattern bound, never written into the SQL. Where the
    queue keeps no arguments (``column`` None) it is refused, saying why (``absent``)."""
    if column is None:
        raise UsageError(f"queue {queue!r}: {absent}")
    why = problem(text)
    if why is not None:
        raise UsageError(f"--args-like: {why}")
    return as_text(column).ilike(pattern(text.strip()), escape=ESCAPE)


def excerpt(args: str | None, text: str, width: int = EXCERPT) -> str:
    """The arguments around the first match of ``text``, cut with "…" where they go on."""
    if not args:
        return "-"
    flat = " ".join(args.split())
    found = re.search(re.escape(" ".join(text.split())), flat, re.IGNORECASE)
    start, end = (found.start(), found.end()) if found else (0, 0)
    lo, hi = max(0, start - width), min(len(flat), end + width)
    return ("…" if lo else "") + flat[lo:hi] + ("…" if hi < len(flat) else "")


@dataclass(frozen=True)
class ArgsMatch:
    """One job whose arguments hold the text: what the listing shows of it."""

    id: str
    status: str
    canonical: CanonicalState
    group: str | None  # its type, where the queue keeps one
    excerpt: str


@dataclass(frozen=True)
class ArgsFound:
    """The matches of a lookup: the first ``SHOWN`` of them (by id), and how many it
    counted (``counted``: all of them, unless ``capped``: then it stopped counting at
    ``COUNTED`` + 1, and there are at least that many)."""

    text: str
    rows: list[ArgsMatch]
    counted: int

    @property
    def capped(self) -> bool:
        return self.counted > COUNTED

    @property
    def more(self) -> int:
        """How many matches beyond those listed it counted (at least, where ``capped``)."""
        return max(self.counted - len(self.rows), 0)


@dataclass(frozen=True)
class Lookup:
    """Where a profile keeps a job's arguments, for the lookup: the rows (a table or a
    join), which of them are its queue's, and over them a job's id, status (with the
    canonical state of each of its values), type and arguments."""

    source: sa.FromClause
    scope: Sequence[sa.ColumnElement[bool]]
    id: sa.ColumnElement[Any]
    status: sa.ColumnElement[Any]
    canonical: Callable[[str], CanonicalState]
    group: sa.ColumnElement[Any] | None
    args: sa.ColumnElement[Any]


async def look_up(conn: AsyncConnection, queue: str, how: Lookup, text: str) -> ArgsFound:
    """Jobs of the queue whose arguments hold ``text``. A scan (no index answers a
    substring of a payload), bounded: it stops after ``COUNTED`` + 1 matches, counts
    those, and reads the arguments of the ``SHOWN`` it lists."""
    group = how.group if how.group is not None else sa.null()
    found = (
        sa.select(
            how.id.label("id"),
            how.status.label("status"),
            group.label("grp"),
            as_text(how.args).label("args"),
        )
        .select_from(how.source)
        .where(*how.scope, where(queue, how.args, text))  # after the scope: a scan of it
        .limit(COUNTED + 1)
        .subquery("qb_args")
    )
    listing = sa.select(found, sa.func.count().over().label("counted")).order_by(found.c.id)
    rows = (await conn.execute(listing.limit(SHOWN))).all()
    counted = int(rows[0].counted) if rows else 0
    shown = [
        ArgsMatch(
            id=_text(r.id),
            status=_text(r.status),
            canonical=how.canonical(_text(r.status)),
            group=_text(r.grp) if r.grp is not None else None,
            excerpt=excerpt(r.args, text.strip()),
        )
        for r in rows
    ]
    return ArgsFound(text=text.strip(), rows=shown, counted=counted)


def _text(value: Any) -> str:
    """An id, status or type as a person reads it (a UUID as text, an enum by its value)."""
    return str(value.value if isinstance(value, enum.Enum) else value)
