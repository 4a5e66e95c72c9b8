"""Triage's counts on a large table: exact for every row an operator acts on, estimated
for the succeeded ones.

Counting every row of a queue table is a pass over its whole status index, and on a
table of millions that pass is most of what a triage costs: most rows of a long-lived
queue are succeeded jobs, which nothing in a triage acts on. So on PostgreSQL, once the
planner's own estimate of the table's rows (``pg_class.reltuples`` scaled to the table's
current size, as the planner scales it) reaches ``ESTIMATE_FROM``, triage counts every
status except the succeeded one exactly, each from its own range of the status index,
and gives the succeeded count as that estimate less the exact counts. The reply marks
the estimate (and every total it is part of) with ``≈``; ``--exact`` counts everything.

Exact, always: every status that is not the succeeded one, statuses the profile does not
know and rows without a status included (``counts_except`` walks the index's distinct
values instead of listing the known ones), and therefore every dead-letter, pending,
in-flight and cancelled count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

# The planner's estimate of a table's rows from which triage estimates its succeeded rows
# instead of counting them: below it, counting them costs a few tens of milliseconds.
ESTIMATE_FROM = 500_000


def rounded(n: int) -> int:
    """An estimated count as a reply shows it: three significant figures (914,223 ->
    914,000), so it does not look counted."""
    if n <= 0:
        return 0
    return round(n, min(0, 3 - len(str(n))))


# The planner's estimate of the table's live rows (None without statistics: never
# vacuumed or analysed, or a partitioned parent), as the planner scales it (``reltuples``
# per page times the pages the table has now), and whether a valid, whole-table btree
# index leads with the status column (without one the walk of its values would be a scan
# per status). The table's name and the column's are bound values.
_CATALOG = sa.text("""
SELECT CASE WHEN c.relpages > 0 AND c.reltuples >= 0
            THEN c.reltuples::float8 / c.relpages
                 * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
       END AS rows,
       EXISTS (SELECT 1
               FROM pg_index AS i
               JOIN pg_class AS ic ON ic.oid = i.indexrelid
               JOIN pg_am AS am ON am.oid = ic.relam
               JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
               WHERE i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL
                 AND am.amname = 'btree' AND a.attname = :column) AS indexed
FROM pg_class AS c
WHERE c.oid = to_regclass(:table)
""")


@dataclass(frozen=True)
class Plan:
    """One table whose succeeded rows triage estimates: which status, from how many rows."""

    status: str
    rows: float


async def plans(
    conn: AsyncConnection, wanted: Sequence[tuple[sa.Column[Any], Sequence[str]]]
) -> list[Plan | None]:
    """For each (status column, its table's succeeded statuses), the estimate to make, or
    None where the table is counted exactly: not PostgreSQL; not exactly one succeeded
    status (an estimate cannot split rows between two); no statistics; fewer estimated
    rows than ``ESTIMATE_FROM``; no index leading with the status column; or no row in
    the succeeded status at all (there is then nothing to estimate, and an estimate would
    only show the statistics' error as rows)."""
    if conn.dialect.name != "postgresql":
        return [None] * len(wanted)
    preparer = conn.dialect.identifier_preparer
    out: list[Plan | None] = []
    for column, statuses in wanted:
        if len(statuses) != 1:
            out.append(None)
            continue
        catalog = (
            _CATALOG.bindparams(table=preparer.format_table(column.table), column=column.name)
            .columns(sa.column("rows", sa.Float), sa.column("indexed", sa.Boolean))
            .subquery("qb_catalog")
        )
        # one round trip; the probe for a succeeded row only runs where the index is
        present = sa.case((catalog.c.indexed, sa.exists().where(column == statuses[0])))
        found = (await conn.execute(sa.select(catalog.c.rows, present))).first()
        rows, succeeded = (found[0], found[1]) if found is not None else (None, False)
        if rows is None or rows < ESTIMATE_FROM or not succeeded:
            out.append(None)
            continue
        out.append(Plan(statuses[0], float(rows)))
    return out


def settle(plan: Plan | None, counts: dict[str, int]) -> bool:
    """Put the estimated succeeded count into ``counts`` (the exact counts of every other
    status) and say so. False, leaving ``counts`` alone, where there is no plan, or where
    the statistics put the table below what was counted exactly (rows added since the
    last analyse on pages it never saw): the caller then counts everything again, in one
    snapshot (``exact``)."""
    if plan is None:
        return False
    left = round(plan.rows) - sum(counts.values())
    if left < 0:
        return False
    counts[plan.status] = left
    return True


def counts_except(
    table: sa.Table,
    status: sa.Column[Any],
    skip: Sequence[str],
    *,
    group: Sequence[sa.ColumnElement[Any]] = (),
) -> sa.Select[Any]:
    """Rows per status (and per ``group`` within it) for every status but ``skip``, each
    counted from its own range of an index that leads with the status column.

    The statuses come from a walk of the index's distinct values (one descent per
    status, a "loose index scan"), so a status nobody listed is counted too, and rows
    whose status is NULL are counted apart. Rows: ``(status, *group, count)``."""
    seed = sa.select(status.label("status")).where(status.is_not(None))
    seed = seed.order_by(status).limit(1)
    walk = seed.cte("qb_status_walk", recursive=True)
    after = sa.select(status).where(status > walk.c.status).order_by(status).limit(1)
    walk = walk.union_all(sa.select(after.scalar_subquery()).where(walk.c.status.is_not(None)))
    per_status = (
        sa.select(*group, sa.func.count().label("n"))
        .where(status == walk.c.status)
        .group_by(*group)
        .lateral("per_status")
    )
    known = (
        sa.select(walk.c.status, *(per_status.c[i] for i in range(len(group) + 1)))
        .select_from(walk.join(per_status, sa.true()))
        .where(walk.c.status.is_not(None), walk.c.status.not_in(list(skip)))
    )
    unset = (
        sa.select(sa.null().label("status"), *group, sa.func.count())
        .select_from(table)
        .where(status.is_(None))
        .group_by(*group)
    )
    if not group:
        unset = unset.having(sa.func.count() > 0)
    return sa.select(sa.union_all(known, unset).subquery())
