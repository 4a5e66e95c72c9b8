"""The partial index on a preset's dead jobs, for a system that ships no index finding them
(pg-boss, graphile-worker, GoodJob, Que, Procrastinate): ``queuebot estate indexes``
prints it, ``config check`` says whether it is there.

Without one, what reads the dead jobs alone (triage's newest dead jobs' errors, /queue
dlq, the dead-letter count a staged redrive checks) scans the jobs table. The index holds
exactly the dead jobs, so it stays small. Its WHERE is compiled from the very condition
those reads select dead jobs by (``SystemBase.in_states`` of the dead states, [statuses]
and renamed columns included): PostgreSQL uses a partial index only for a query whose
condition implies the index's, and the same condition does. It is the team's: they own
the table, and queuebot never creates it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.tables import BoundTable
from services.identifiers import quote_identifier, validate_identifier

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase

MAX_NAME = 63  # PostgreSQL's identifiers


@dataclass(frozen=True)
class DeadIndex:
    """The index to recommend: its name, the table it is on (``schema.name``), its columns
    and its WHERE as SQL; where the table is partitioned (pg-boss's, one partition per
    queue), its partitions (``schema.name``); ``left_out``: why none can be printed."""

    name: str
    table: str
    columns: tuple[str, ...]
    where: str
    system: str  # the system's name, as its users write it
    reads: str  # what reads the dead jobs alone there, in words
    partitions: tuple[str, ...] = ()
    partitioned: bool = False
    attached: tuple[str, ...] = ()  # partitions whose index is attached to it already
    left_out: str | None = None


# PostgreSQL's SQL as printed, not as a driver takes it: a ``%`` in a value stays one.
_PRINTED = postgresql.dialect(paramstyle="named")  # type: ignore[no-untyped-call]


def _predicate(where: sa.ColumnElement[bool]) -> str:
    """The condition as SQL text with its values inline and its columns unqualified (as an
    index's WHERE names them): what the reads send, bound values in place."""
    compiled = where.compile(
        dialect=_PRINTED,
        compile_kwargs={"literal_binds": True, "include_table": False},
    )
    return str(compiled)


def _columns_of(element: sa.ClauseElement) -> set[str]:
    """The names of the columns a condition reads."""
    if isinstance(element, sa.ColumnClause):
        return {element.name}
    return {name for child in element.get_children() for name in _columns_of(child)}


def _name(table: sa.Table, where: str, own: bool) -> str:
    """``qb_<table>_dead``: one per table, whichever queuebot queues read it; where
    [statuses] makes the dead jobs other than the system's own, the condition's hash is
    added, so two definitions never share a name."""
    base = f"qb_{table.name.lstrip('_')}_dead"
    if not own:
        base = f"{base[: MAX_NAME - 9]}_{hashlib.sha256(where.encode()).hexdigest()[:8]}"
    return validate_identifier(base[:MAX_NAME])


# A partitioned table's partitions, and whether each has its index attached to the index
# ``:index`` already (an earlier run's, or one made as the partition was attached).
_PARTITIONS = sa.text("""
SELECT n.nspname, c.relname, c.relkind,
       EXISTS (SELECT 1
               FROM pg_inherits AS ih
               JOIN pg_index AS x ON x.indexrelid = ih.inhrelid
               WHERE ih.inhparent = to_regclass(:index) AND x.indrelid = c.oid) AS attached
FROM pg_partition_tree(to_regclass(:table)) AS p
JOIN pg_class AS c ON c.oid = p.relid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE p.level = 1
ORDER BY n.nspname, c.relname
""")
_KIND = sa.text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:table)")


def _qualified(table: sa.Table) -> str:
    return f"{table.schema}.{table.name}" if table.schema else table.name


async def recommend(
    conn: AsyncConnection, profile: SystemBase, t: Mapping[str, BoundTable]
) -> DeadIndex | None:
    """The index for this preset on its tables as reflected; None where its system ships
    one that finds its dead jobs."""
    found = profile.dead_index_on(t)
    if found is None:
        return None
    table, columns, where = found
    sql = _predicate(where)
    own = [s for s, state in type(profile).states.items() if state in profile.dead_letter_states]
    name = _name(table, sql, own=sorted(own) == sorted(profile.dead_letter_statuses))
    qualified = _qualified(table)
    absent = sorted((set(columns) | _columns_of(where)) - set(table.c.keys()))
    index = DeadIndex(name, qualified, columns, sql, profile.system, _reads(profile))
    if absent:
        return replace(index, left_out=f"{qualified} has no column {', '.join(absent)}")
    kind = (await conn.execute(_KIND, {"table": _quoted(qualified)})).scalar_one_or_none()
    if kind != "p":
        return index
    parent = f"{table.schema}.{name}" if table.schema else name
    rows = (
        await conn.execute(_PARTITIONS, {"table": _quoted(qualified), "index": _quoted(parent)})
    ).all()
    if any(r[2] == "p" for r in rows):
        why = f"{qualified}'s partitions are partitioned again: make the index on each by hand"
        return replace(index, partitioned=True, left_out=why)
    return replace(
        index,
        partitions=tuple(f"{r[0]}.{r[1]}" for r in rows if not r[3]),
        partitioned=True,
        attached=tuple(f"{r[0]}.{r[1]}" for r in rows if r[3]),
    )


def _quoted(name: str) -> str:
    return quote_identifier(name)


def _on(index: DeadIndex, name: str, table: str, *, only: bool, concurrently: bool) -> str:
    cols = ", ".join(quote_identifier(c) for c in index.columns)
    how = " CONCURRENTLY" if concurrently else ""
    where = " ONLY" if only else ""
    return (
        f"CREATE INDEX{how} IF NOT EXISTS {quote_identifier(name)} ON{where} "
        f"{quote_identifier(table)} ({cols}) WHERE {index.where};"
    )


def _part_name(index: DeadIndex, partition: str) -> str:
    digest = hashlib.sha256(partition.encode()).hexdigest()[:8]
    return validate_identifier(f"{index.name[: MAX_NAME - 9]}_{digest}")


def statements(index: DeadIndex) -> list[str]:
    """The comments and SQL ``estate indexes`` prints for it."""
    system, table = index.system, index.table
    died = ", then when a job died, which they order by" if len(index.columns) > 1 else ""
    out = [
        f"-- Optional: {system} ships no index that finds its dead jobs, so {index.reads} "
        f"each read every job of {table} (or of the queue they keep to) to find them. This "
        "partial index holds exactly the dead jobs (its WHERE is the condition those reads "
        "select them by), so it stays small, and a job that is not dead adds nothing to it. "
        f"Its columns: the queue those reads keep to{died}.",
        f"-- It is your team's: {table} is {system}'s table, which you own, and queuebot "
        "never creates an index on it. One index serves every queuebot queue of the table: "
        "its queue column leads, so a queue kept to one of the system's queues (queue_name) "
        "reads its own dead jobs from it; one per queue_name would only repeat it.",
    ]
    if index.left_out is not None:
        return [*out, f"-- {index.name} left out: {index.left_out}"]
    if not index.partitioned:
        return [*out, _on(index, index.name, table, only=False, concurrently=True)]
    schema = table.rpartition(".")[0]
    out.append(
        f"-- {table} is partitioned (a partition per queue), and PostgreSQL cannot build an "
        "index on a partitioned table CONCURRENTLY: the index is made on the table alone "
        "(at once, empty and not valid), built CONCURRENTLY on each partition and attached "
        "to it; once every partition's is attached it is valid. A partition made later "
        f"(a new {system} queue) gets its own as it is attached."
    )
    out.append(_on(index, index.name, table, only=True, concurrently=False))
    parent = f"{schema}.{index.name}" if schema else index.name
    if index.attached:
        out.append(f"-- attached already: {', '.join(index.attached)}")
    for partition in index.partitions:
        part = _part_name(index, partition)
        out.append(_on(index, part, partition, only=False, concurrently=True))
        qualified = f"{partition.rpartition('.')[0]}.{part}" if "." in partition else part
        out.append(
            f"ALTER INDEX {quote_identifier(parent)} ATTACH PARTITION "
            f"{quote_identifier(qualified)};"
        )
    return out


def _reads(profile: SystemBase) -> str:
    keeps = profile.no_error_text is None
    newest = "triage's read of the newest dead jobs' errors, " if keeps else ""
    return f"{newest}/queue dlq and the dead-letter count a staged redrive checks"


# -- config check ------------------------------------------------------------------------

_INDEXES = sa.text("""
SELECT c.relname, i.indisvalid, pg_get_expr(i.indpred, i.indrelid)
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass(:table)
ORDER BY c.relname
""")
_CAST = re.compile(r"::[a-z_][a-z0-9_$.]*(\[\])?")
_IN = re.compile(r"(\S+) in \(([^()]*)\)")


def _normal(predicate: str) -> tuple[str, ...]:
    """A condition in a form both PostgreSQL's text of an index's WHERE and queuebot's
    compiled one reduce to: no casts, quotes or parentheses, ``IN`` as PostgreSQL keeps
    it (``=`` for one value, ``= ANY (ARRAY[...])`` for more), its ANDed terms sorted."""
    text = _CAST.sub("", " ".join(predicate.lower().split())).replace('"', "")

    def as_kept(m: re.Match[str]) -> str:
        items = [v.strip() for v in m.group(2).split(",")]
        if len(items) == 1:
            return f"{m.group(1)} = {items[0]}"
        return f"{m.group(1)} = any array[{', '.join(items)}]"

    text = _IN.sub(as_kept, text)
    flat = " ".join(text.replace("(", " ").replace(")", " ").split())
    return tuple(sorted(flat.split(" and ")))


def matching(index: DeadIndex, found: Sequence[tuple[str, bool, str | None]]) -> list[str]:
    """Of the table's indexes ``(name, valid, WHERE)``, the ones that are this index: by
    its name, or by a WHERE that is its condition (an index made by hand, named otherwise);
    valid ones first."""
    wanted = _normal(index.where)
    same = [
        (name, valid)
        for name, valid, where in found
        if name == index.name or (where is not None and _normal(where) == wanted)
    ]
    return [f"{name}{'' if valid else ' (not valid)'}" for name, valid in sorted(same, key=_key)]


def _key(item: tuple[str, bool]) -> tuple[bool, str]:
    return (not item[1], item[0])


async def check_lines(
    conn: AsyncConnection, profile: SystemBase, t: Mapping[str, BoundTable]
) -> list[str]:
    """What ``config check`` says of the index, as information: there (valid or not), or
    not, and what it would speed up. Nothing where the system ships one."""
    index = await recommend(conn, profile, t)
    if index is None:
        return []
    if index.left_out is not None:
        return [f"dead jobs: no index recommended for them here ({index.left_out})"]
    rows = (await conn.execute(_INDEXES, {"table": _quoted(index.table)})).all()
    found = matching(index, [(str(r[0]), bool(r[1]), r[2]) for r in rows])
    if not found:
        return [
            f"dead jobs: no index finds them ({profile.system} ships none, and the partial "
            f"index {index.name} is not on {index.table}): {index.reads} each read every "
            "job of the table (or of the queue) to find them; `queuebot estate indexes` "
            "prints it (optional)"
        ]
    if found[0].endswith("(not valid)"):
        return [
            f"dead jobs: index {found[0].removesuffix(' (not valid)')} on {index.table} is "
            "there but not valid, so PostgreSQL does not use it: a CREATE INDEX CONCURRENTLY "
            "that failed (drop it and run it again), or, on a partitioned table, a partition "
            "whose index is not attached yet (`queuebot estate indexes` prints each step)"
        ]
    return [
        f"dead jobs: index {found[0]} on {index.table} finds them ({index.reads} can read "
        "them from it)"
    ]
