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

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
# vacuumed or analysed), as the planner scales it (``reltuples`` per page times the pages
# the table has now), summed over the partitions of a partitioned table (whose parent
# has no rows of its own: pg-boss keeps one partition per queue); whether a valid,
# whole-table btree index leads with the status column (without one the walk of its
# values would be a scan per status); and the share of rows in ``status`` by the
# column's statistics (its most common values, weighted by each partition's rows; 0 where
# the statistics do not list it), and the share of rows where the column is not NULL
# (``filled``). The names and the status are bound values.
_CATALOG = sa.text("""
WITH tree AS (
    SELECT relid, isleaf FROM pg_partition_tree(to_regclass(:table))
), tables AS (  -- the partitions, or the table itself when it has none
    SELECT relid FROM tree WHERE isleaf
    UNION ALL
    SELECT to_regclass(:table) WHERE NOT EXISTS (SELECT 1 FROM tree)
), leaves AS (
    SELECT c.oid,
           CASE WHEN c.relpages > 0 AND c.reltuples >= 0
                THEN c.reltuples::float8 / c.relpages
                     * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
                WHEN pg_relation_size(c.oid) = 0 THEN 0
           END AS rows,
           n.nspname, c.relname
    FROM tables
    JOIN pg_class AS c ON c.oid = tables.relid
    JOIN pg_namespace AS n ON n.oid = c.relnamespace
)
SELECT CASE WHEN bool_and(leaves.rows IS NOT NULL) THEN sum(leaves.rows) END AS rows,
       EXISTS (SELECT 1
               FROM pg_index AS i
               JOIN pg_class AS ic ON ic.oid = i.indexrelid
               JOIN pg_am AS am ON am.oid = ic.relam
               JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
               WHERE i.indrelid = to_regclass(:table) AND i.indisvalid AND i.indpred IS NULL
                 AND am.amname = 'btree' AND a.attname = :column) AS indexed,
       coalesce(sum(leaves.rows * (
           SELECT m.freq
           FROM pg_stats AS s,
                unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS m(value, freq)
           WHERE s.schemaname = leaves.nspname AND s.tablename = leaves.relname
             AND s.attname = :column AND NOT s.inherited AND m.value = :status
       )) / nullif(sum(leaves.rows), 0), 0) AS share,
       coalesce(sum(leaves.rows * (
           SELECT 1 - s.null_frac
           FROM pg_stats AS s
           WHERE s.schemaname = leaves.nspname AND s.tablename = leaves.relname
             AND s.attname = :column AND NOT s.inherited
       )) / nullif(sum(leaves.rows), 0), 0) AS filled
FROM leaves
HAVING count(*) > 0
""")

# Without an index on the status column, an estimate still pays where the succeeded rows
# are most of the table: one pass over it then counts only the other rows (a cheap
# filter per row instead of counting and grouping each one) and takes the newest dead
# jobs from what it collected, instead of a grouped pass and a second pass for them.
SCAN_SHARE = 0.5


@dataclass(frozen=True)
class Plan:
    """One table whose succeeded rows triage estimates: which status, from how many rows;
    ``indexed``: the other statuses are counted from an index leading with the status
    column (``counts_except``), else from one pass over the table (the caller's)."""

    status: str
    rows: float
    indexed: bool = True


async def plans(
    conn: AsyncConnection,
    wanted: Sequence[tuple[sa.Column[Any], Sequence[str]]],
    *,
    scan: bool = False,
) -> list[Plan | None]:
    """For each (status column, its table's succeeded statuses), the estimate to make, or
    None where the table is counted exactly: not PostgreSQL; not exactly one succeeded
    status (an estimate cannot split rows between two); no statistics; fewer estimated
    rows than ``ESTIMATE_FROM``; no index leading with the status column (with ``scan``,
    where the caller counts the rest in one pass of its own: unless the statistics put at
    least ``SCAN_SHARE`` of the rows in the succeeded status); or no row in the succeeded
    status at all (there is then nothing to estimate, and an estimate would only show the
    statistics' error as rows)."""
    if conn.dialect.name != "postgresql":
        return [None] * len(wanted)
    out: list[Plan | None] = []
    for column, statuses in wanted:
        if len(statuses) != 1:
            out.append(None)
            continue
        catalog = _catalog(conn, column.table, column.name, statuses[0])
        usable: sa.ColumnElement[bool] = catalog.c.indexed
        if scan:
            usable = sa.or_(usable, catalog.c.share >= SCAN_SHARE)
        # the probe for a succeeded row only runs where an estimate could be made (without
        # the index, where the statistics say such rows are common: a scan finds one at once)
        out.append(await _plan(conn, catalog, usable, column == statuses[0], statuses[0]))
    return out


async def scan_plan(
    conn: AsyncConnection,
    table: sa.Table,
    *,
    status: str,
    succeeded: sa.ColumnElement[bool],
    set_on_success: str,
) -> Plan | None:
    """The estimate to make for a table with no status column, whose status ``status``
    (the rows ``succeeded`` selects) is derived from its columns, and which the caller
    counts in one pass of its own: where ``set_on_success`` is a column every succeeded
    row has set (and few others), and the statistics say at least ``SCAN_SHARE`` of the
    rows have it set. None otherwise, as ``plans`` says."""
    if conn.dialect.name != "postgresql":
        return None
    catalog = _catalog(conn, table, set_on_success, "")
    plan = await _plan(conn, catalog, catalog.c.filled >= SCAN_SHARE, succeeded, status)
    return replace(plan, indexed=False) if plan is not None else None  # no status index


def _catalog(conn: AsyncConnection, table: sa.Table, column: str, status: str) -> sa.Subquery:
    preparer = conn.dialect.identifier_preparer
    return (
        _CATALOG.bindparams(table=preparer.format_table(table), column=column, status=status)
        .columns(
            sa.column("rows", sa.Float),
            sa.column("indexed", sa.Boolean),
            sa.column("share", sa.Float),
            sa.column("filled", sa.Float),
        )
        .subquery("qb_catalog")
    )


async def _plan(
    conn: AsyncConnection,
    catalog: sa.Subquery,
    usable: sa.ColumnElement[bool],
    succeeded: sa.ColumnElement[bool],
    status: str,
) -> Plan | None:
    """One round trip: the table's rows, whether the index is there, and (only where
    ``usable``) whether any row is in the succeeded status."""
    present = sa.case((usable, sa.exists().where(succeeded)), else_=False)
    found = (await conn.execute(sa.select(catalog.c.rows, catalog.c.indexed, present))).first()
    if found is None or found[0] is None or found[0] < ESTIMATE_FROM or not found[2]:
        return None
    return Plan(status, float(found[0]), indexed=bool(found[1]))


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


# -- the live backlog of a table that deletes its successes, from a sample -----------------

# The rows a sample aims at: that share of the table's pages (``TABLESAMPLE SYSTEM``). A
# count holding a share ``s`` of the table's N jobs, were its jobs drawn one by one, would
# be off by about sqrt((1 - p) / (p * N * s)) of itself (one standard error; p =
# SAMPLE_ROWS / N); a page holds jobs enqueued together, so the error is measured from the
# sample's pages instead (``Sample.error``; docs/presets.md works a figure).
SAMPLE_ROWS = 50_000


def seed() -> int:
    """The seed of one triage's sample (``REPEATABLE``): its statements read the same
    pages, and a test can draw them again."""
    return secrets.randbelow(2**31)


@dataclass(frozen=True)
class Sample:
    """A triage that counts a large table's backlog from a sample of its pages: the
    table's estimated rows (the planner's, as ``plans`` reads them), the percentage of
    its pages read and the sample's seed."""

    rows: float
    percent: float
    seed: int

    def of(self, table: sa.FromClause) -> sa.TableSample:
        """``table``'s sample: ``TABLESAMPLE SYSTEM (percent) REPEATABLE (seed)``."""
        return sa.tablesample(
            table,
            sa.func.system(sa.literal(self.percent, sa.Float)),
            name="qb_sample",
            seed=sa.literal(self.seed, sa.Integer),
        )

    def scaled(self, counted: int) -> int:
        """A count over the whole table from its count in the sample."""
        return round(counted * 100 / self.percent)

    def error(self, counted: int, squares: int) -> float:
        """One standard error of a count scaled from the sample, as a share of it, from
        the count's jobs in the sample (``counted``) and the sum over the sampled pages of
        the square of each page's count (``squares``): each page is drawn on its own, so
        the variance of the scaled count is (1 - p) / p^2 times that sum (p the share of
        pages read). Jobs alike on one page (enqueued together) make it larger, as they
        should."""
        if counted <= 0:
            return 0.0
        drawn = self.percent / 100
        return float(((1 - drawn) * squares) ** 0.5 / counted)


async def sample_plan(conn: AsyncConnection, table: sa.Table) -> Sample | None:
    """The sample to count ``table``'s backlog from where its estimated rows reach
    ``ESTIMATE_FROM`` (one catalog read, no scan); None where it is counted exactly: not
    PostgreSQL, no statistics, or fewer rows."""
    if conn.dialect.name != "postgresql":
        return None
    catalog = _catalog(conn, table, "", "")
    rows = (await conn.execute(sa.select(catalog.c.rows))).scalar_one_or_none()
    if rows is None or rows < ESTIMATE_FROM:
        return None
    return Sample(float(rows), min(100.0, 100.0 * SAMPLE_ROWS / float(rows)), seed())


# Whether a valid partial btree index of the table leads with these columns, in this order
# (names bound: the table as ``to_regclass`` takes it, the columns as a text array).
_LEADS = sa.text("""
SELECT EXISTS (
    SELECT 1
    FROM pg_index AS i
    JOIN pg_class AS ic ON ic.oid = i.indexrelid
    JOIN pg_am AS am ON am.oid = ic.relam
    WHERE i.indrelid = to_regclass(:table) AND i.indisvalid AND i.indpred IS NOT NULL
      AND am.amname = 'btree'
      AND ARRAY(
          SELECT coalesce(a.attname::text, '')
          FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
          LEFT JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
          ORDER BY k.n
          LIMIT cardinality(CAST(:columns AS text[]))
      ) = CAST(:columns AS text[])
)
""")


async def partial_index_leads(
    conn: AsyncConnection, table: sa.Table, columns: Sequence[str]
) -> bool:
    """Whether ``table`` has a valid partial btree index leading with ``columns`` (a walk
    of it is a few descents; without it, each step of the walk would read the table)."""
    if conn.dialect.name != "postgresql":
        return False
    name = conn.dialect.identifier_preparer.format_table(table)
    found = await conn.execute(_LEADS, {"table": name, "columns": list(columns)})
    return bool(found.scalar_one())
