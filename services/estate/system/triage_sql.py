"""The statements of a preset's triage (``SystemTriage``): its counts read in one pass, by
each derived state's condition or from a sample of the table's pages, the oldest waiting
job (plainly, or walked from the system's own index of its waiting jobs) and the newest
dead jobs' errors, each built from the system's facts its preset declares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from services.estate import estimate
from services.estate.model import CanonicalState
from services.estate.signature import SIGNATURE_SAMPLE
from services.estate.system.base import GONE, PendingIndex
from services.estate.tables import BoundTable

if TYPE_CHECKING:
    from services.estate.system.base import SystemBase

UNKNOWN = "unknown"
COUNTS, ERRORS = "counts", "errors"  # the one pass's rows: its counts, its errors


class TriageStatements:
    """The statements of one preset's triage."""

    def __init__(self, profile: SystemBase) -> None:
        self.profile = profile

    def sampled(self, t: Mapping[str, BoundTable], sample: estimate.Sample) -> sa.Select[Any]:
        """The sample's jobs by state and job type, and for each state the sum over the
        sampled pages of the square of its count on each page (what its error is
        measured from). One scan of the sample, grouped as it is read by page, state and
        job type; those few groups kept apart (MATERIALIZED: the jobs themselves are not)
        and summed twice. Rows: ``("k", state, type, count, NULL)`` and ``("s", state,
        NULL, count, squares)``."""
        profile = self.profile
        drawn, page = profile.sampled(t, sample)
        kind = profile.cols.kind
        state = profile.state_value(drawn)
        kinds = [profile.job(drawn).c(kind)] if kind is not None else []
        groups = (
            sa.select(
                page.label("page"),
                state.label("state"),
                (kinds[0] if kinds else sa.null()).label("kind"),
                sa.func.count().label("y"),
            )
            .select_from(profile.job(drawn).table)
            .group_by(page, state, *kinds)
            .cte("qb_sampled")
            .prefix_with("MATERIALIZED", dialect="postgresql")
        )
        by_type = sa.select(
            sa.literal("k").label("part"),
            groups.c.state,
            groups.c.kind,
            sa.func.sum(groups.c.y).label("n"),
            sa.null().label("squares"),
        ).group_by(groups.c.state, groups.c.kind)
        pages = (
            sa.select(groups.c.state, sa.func.sum(groups.c.y).label("y"))
            .group_by(groups.c.page, groups.c.state)
            .subquery("qb_pages")
        )
        by_state = sa.select(
            sa.literal("s"),
            pages.c.state,
            sa.null(),
            sa.func.sum(pages.c.y),
            sa.func.sum(pages.c.y * pages.c.y),
        ).group_by(pages.c.state)
        return sa.select(sa.union_all(by_type, by_state).subquery("qb_sample_counts"))

    def by_condition(
        self,
        t: Mapping[str, BoundTable],
        where: list[sa.ColumnElement[bool]],
        cutoff: datetime,
    ) -> sa.Select[Any]:
        """Every job counted, on a system without a state column: per job type, the jobs in
        each state (a count filtered by the state's own condition: grouping by the state's
        expression instead makes PostgreSQL sort a million rows, since it cannot tell how few
        values the expression has), all of them, the oldest waiting one and the stuck ones.
        The rows are read as ``pass_source`` says: where it joins the tables that hold a
        job's state (Solid Queue's executions), each is read once and a state is tested by
        its value there, not looked up once per job and state. Rows: ``(*type, count,
        *count per state, oldest waiting, stuck)``; ``spread`` turns them into the grouped
        rows triage reads."""
        profile = self.profile
        q = profile.job(t)
        read = profile.pass_source(t)
        groups = [q.c(profile.cols.kind)] if profile.cols.kind is not None else []

        def is_(state: str) -> sa.ColumnElement[bool]:
            return read.state == state if read.joined else profile.state_where(t, state)

        def among(states: Sequence[str]) -> sa.ColumnElement[bool]:
            return read.state.in_(states) if read.joined else profile.in_states(t, states)

        pending = among(profile.statuses_in(CanonicalState.PENDING))
        running = among(profile.statuses_in(CanonicalState.IN_FLIGHT))
        # as stuck_where, its scope already in ``where``
        stuck = sa.and_(running, read.started < cutoff) if read.started is not None else sa.false()
        return (
            sa.select(
                *groups,
                sa.func.count(),
                *(sa.func.count().filter(is_(s)) for s in self.named()),
                sa.func.min(profile.waiting_since(t)).filter(pending),
                sa.func.count().filter(stuck),
            )
            .select_from(read.source)
            .where(*where)
            .group_by(*groups)
        )

    def named(self) -> list[str]:
        return [s for s in self.profile.states if s != GONE]

    def spread(self, rows: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``by_condition``'s rows as ``(state, *type, count, oldest waiting, stuck)`` rows,
        a job in no state's condition counted as ``unknown``."""
        profile = self.profile
        named = self.named()
        lead = 1 if profile.cols.kind is not None else 0
        out: list[tuple[Any, ...]] = []
        for row in rows:
            kind, total = tuple(row[:lead]), int(row[lead])
            counts = [int(n) for n in row[lead + 1 : lead + 1 + len(named)]]
            waiting, stuck = row[-2], int(row[-1] or 0)
            found = [(s, n) for s, n in zip(named, counts, strict=True) if n]
            if total > sum(counts):
                found.append((UNKNOWN, total - sum(counts)))
            for i, (name, n) in enumerate(found):
                out.append((name, *kind, n, waiting if i == 0 else None, stuck if i == 0 else 0))
        return out

    def one_pass(
        self,
        t: Mapping[str, BoundTable],
        keep: sa.ColumnElement[bool],
        cutoff: datetime,
    ) -> sa.Select[Any]:
        """Triage's reads in one pass over a table whose state no index leads with, where
        the succeeded jobs are estimated (or a backlog is sampled): every job ``keep``
        selects (every other one, or the dead and running ones) is collected once (a cheap
        filter per row), then counted by state and job type with the oldest waiting one and the
        stuck count, and its newest dead jobs' errors taken from the same rows. The rows are
        read as ``pass_source`` says, and whether a job is waiting, running or dead is its
        state there (one of those states' names), so a system that joins its state in looks
        nothing up per job. Rows: ``(COUNTS, state, *type, count, oldest waiting, stuck,
        NULL)`` and one ``(ERRORS, NULL, ..., errors)``."""
        profile = self.profile
        q = profile.job(t)
        cols = profile.cols
        read = profile.pass_source(t)
        state, error, died = read.state, read.error, read.died
        pending = state.in_(profile.statuses_in(CanonicalState.PENDING))
        dead = state.in_(profile.dead_letter_statuses)
        running = state.in_(profile.statuses_in(CanonicalState.IN_FLIGHT))
        stuck = (
            sa.and_(running, read.started < cutoff, *profile.scope(t))
            if read.started is not None
            else sa.false()
        )
        kept: list[sa.ColumnElement[Any]] = [
            state.label("state"),
            sa.case((pending, profile.waiting_since(t))).label("waiting"),
            stuck.label("stuck"),
            dead.label("dead"),
            q.c(cols.id).label("id"),
        ]
        if cols.kind is not None:
            kept.append(q.c(cols.kind).label("kind"))
        if error is not None and died is not None:
            # only the dead jobs' death is read, and only where their errors are taken:
            # on a system whose times are its events' (Procrastinate), a lookup per job
            kept.append(sa.case((dead, died)).label("died"))
        if error is not None:
            kept.append(sa.case((dead, error)).label("error"))
        if error is None:
            # nothing to take from the jobs but their counts: grouped as they are read
            # (no rows kept apart, so PostgreSQL may share the pass among its workers),
            # each pending job's wait and each running job's start read for it alone
            kinds = [q.c(cols.kind)] if cols.kind is not None else []
            since = profile.waiting_since(t)
            return (
                sa.select(
                    sa.literal(COUNTS).label("part"),
                    state.label("state"),
                    *kinds,
                    sa.func.count().label("n"),
                    sa.func.min(since).filter(pending),
                    sa.func.count().filter(stuck),
                    sa.null().label("error"),
                )
                .select_from(read.source)
                .where(keep)
                .group_by(state, *kinds)
            )
        rest = (
            sa.select(*kept)
            .select_from(read.source)
            .where(keep)
            .cte("qb_rest")
            .prefix_with("MATERIALIZED", dialect="postgresql")
        )
        groups = [rest.c.kind] if cols.kind is not None else []
        counts = sa.select(
            sa.literal(COUNTS).label("part"),
            rest.c.state,
            *groups,
            sa.func.count().label("n"),
            sa.func.min(rest.c.waiting),
            sa.func.count().filter(rest.c.stuck),
            sa.null().label("error"),
        ).group_by(rest.c.state, *groups)
        order = [rest.c.died.desc().nulls_last()] if died is not None else []
        newest = (
            sa.select(rest.c.error)
            .where(rest.c.dead)
            .order_by(*order, rest.c.id.desc())
            .limit(SIGNATURE_SAMPLE)
            .subquery("qb_newest")
        )
        blanks = [sa.null()] * (len(groups) + 3)
        # one row: the errors in one array, not a row each to read back
        shown = read.shown(newest.c.error) if read.shown is not None else newest.c.error
        errors = sa.select(
            sa.literal(ERRORS), sa.null(), *blanks, sa.func.array_agg(shown)
        ).select_from(newest)
        return sa.select(sa.union_all(counts, errors).subquery("qb_triage"))

    def oldest(
        self,
        t: Mapping[str, BoundTable],
        where: list[sa.ColumnElement[bool]],
        walk: PendingIndex | None,
    ) -> sa.Select[Any]:
        """The oldest waiting job: walked from ``walk`` (the system's index of its pending
        jobs, for the whole table) where given, else read the plain way."""
        return self.oldest_walked(walk) if walk is not None else self.oldest_pending(t, where)

    def oldest_pending(
        self,
        t: Mapping[str, BoundTable],
        where: list[sa.ColumnElement[bool]],
    ) -> sa.Select[Any]:
        """Since when the longest-waiting job could have run: the earliest time a pending job
        became runnable (where only jobs scheduled for later are pending, that time is ahead
        and the age reads as none)."""
        profile = self.profile
        q = profile.job(t)
        since = profile.waiting_since(t)
        pending = profile.in_states(t, profile.statuses_in(CanonicalState.PENDING))
        return sa.select(sa.func.min(since)).select_from(q.table).where(pending, *where)

    def oldest_walked(self, index: PendingIndex) -> sa.Select[Any]:
        """The oldest waiting job from the system's index of its pending jobs: a walk of
        the index's distinct leading values (a "loose index scan": one descent each, the
        next combination after the last by a row comparison), and for each the least
        ``since`` (its first entry there). The same value ``_oldest_pending`` reads."""
        table, prefix, since = index.table, index.prefix, index.since
        first = sa.select(*prefix).where(index.where).order_by(*prefix).limit(1)
        walk = first.cte("qb_pending_walk", recursive=True)
        after = (
            sa.select(*prefix)
            .where(index.where, sa.tuple_(*prefix) > sa.tuple_(*walk.c))
            .order_by(*prefix)
            .limit(1)
            .lateral("qb_pending_next")
        )
        walk = walk.union_all(sa.select(*after.c).select_from(walk.join(after, sa.true())))
        least = (
            sa.select(sa.func.min(since))
            .select_from(table)
            .where(index.where, *(c == walk.c[c.name] for c in prefix))
            .scalar_subquery()
        )
        return sa.select(sa.func.min(least)).select_from(walk)

    def newest_errors(
        self,
        t: Mapping[str, BoundTable],
        error: sa.ColumnElement[Any],
        where: list[sa.ColumnElement[bool]],
    ) -> sa.Select[Any]:
        """The error texts of the newest dead jobs, whose signatures the reply counts."""
        profile = self.profile
        q = profile.job(t)
        return (
            sa.select(error)
            .select_from(q.table)
            .where(profile.in_states(t, profile.dead_letter_statuses), *where)
            .order_by(*profile.dead_order(dict(t)))
            .limit(SIGNATURE_SAMPLE)
        )
