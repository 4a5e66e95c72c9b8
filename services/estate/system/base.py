"""A preset: the jobs table of a job-queue system the team runs (River, Oban, pg-boss,
Procrastinate ...), read and changed through a profile like queuebot's own two.

The system owns its table: its states, its columns and how it retries a job. So a preset
declares those facts (``Columns``, its states, what a retry and a cancel write, where the
error text is, which NOTIFY wakes its workers) on a subclass of this class, and
``services/estate/system/`` does the rest the same way for every system: the reads
(``reads.py``), triage (``triage.py``), requeue, cancel and redrive as guarded set-based
changes (``changes.py``), the staged redrive's wave outcomes and rollback (``plans.py``).

Every system keeps all its queues in one table: a queuebot queue is the table, and with
``queue_name`` one of its queues (``scope``); every read and change keeps to it.

Only the system's dead state is a dead letter here: a job in its "failed, will retry by
itself" state (River's ``retryable``) is counted and shown as failed, and may be requeued
by id, but /queue dlq and a bulk redrive leave it to the system's own retries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import ConfigError
from services.estate.estimate import Sample
from services.estate.model import CanonicalState, JobEvent
from services.estate.ops import Action
from services.estate.profile import QueueProfile
from services.estate.tables import BoundTable, IndexPlan

# The name of the success a system that deletes a job on success (``success_deletes``)
# shows as its state: no row has it (a staged redrive settles a gone job by the queue's
# ``deleted_jobs`` rule, services/estate/deleted_jobs.py).
GONE = "(gone: succeeded)"
# The label a job's state is read under beside its row.
STATE = "qb_state"
# The prefix of what a rollback keeps that is not a column of the jobs table
# (``kept_elsewhere``): handed to ``restore`` as it was kept.
KEPT = "kept:"


@dataclass(frozen=True)
class Columns:
    """The system's own names of what queuebot reads on its jobs table (``None``: the
    system has no such column)."""

    id: str
    state: str
    queue: str
    attempts: str
    kind: str | None = None  # the job's type: River's kind, Oban's worker ...
    max_attempts: str | None = None
    args: str | None = None  # the job's arguments: pg-boss's data, River's args ...


@dataclass(frozen=True)
class PassSource:
    """What triage's one pass over a large table reads each job from: the rows
    (``source``, the jobs table or a join onto it) and, over them, the job's state and
    its error, death and start times (``None``: the system does not keep it). The error
    is kept as ``error`` reads and, where ``shown`` is given, turned into the error text
    by it for the newest dead jobs alone (the few whose signatures are counted).
    ``joined``: the state is read from tables joined in ``source``, so a count of one
    state tests ``state``'s value there rather than the state's own condition
    (``state_where``, which looks each job up in those tables)."""

    source: sa.FromClause
    state: sa.ColumnElement[Any]
    error: sa.ColumnElement[Any] | None
    died: sa.ColumnElement[Any] | None
    started: sa.ColumnElement[Any] | None
    shown: Callable[[sa.ColumnElement[Any]], sa.ColumnElement[Any]] | None = None
    joined: bool = False


@dataclass(frozen=True)
class PendingIndex:
    """An index of the system's that holds exactly its pending jobs (a partial index whose
    WHERE is ``where``), ordered by ``prefix`` (columns of few distinct values: a walk
    visits each combination once) and then ``since`` (when a pending job may run). The
    oldest waiting job is the least ``since`` over those combinations: one descent each."""

    table: sa.Table
    prefix: tuple[sa.Column[Any], ...]
    since: sa.Column[Any]
    where: sa.ColumnElement[bool]


class SystemBase(QueueProfile):
    """A job-queue system's jobs table (the ``job`` role), in its own words: its facts
    (``SystemReads`` adds the reads; ``SystemProfile`` the triage, changes, staged
    redrives and report)."""

    preset: ClassVar[bool] = True
    system: ClassVar[str]  # the system's name as its users write it: "River"
    default_schema: ClassVar[str]  # where its tables live unless ``schema`` says otherwise
    cols: ClassVar[Columns]
    retry_state: ClassVar[str]  # the state a requeue or redrive writes
    # The state a cancel writes, where the system has a state column (a system without one
    # cancels in its own ``write``, or has ``cancel_off``).
    cancel_state: ClassVar[str | None] = None
    attempt_bump: ClassVar[int] = 0  # what a retry adds to the attempts column
    # The columns a retry changes, which a staged redrive keeps before its wave and a
    # rollback puts back (the state first).
    restored: ClassVar[tuple[str, ...]]
    # Why the system keeps no error text in the database, where it keeps none.
    no_error_text: ClassVar[str | None] = None
    # Where the system keeps no state column: its states are names queuebot gives what its
    # columns say (``state_value`` reads one, ``state_where`` selects one), and a change
    # writes the columns its system's own retry writes, never a state value.
    derived_states: ClassVar[bool] = False
    deleted_by: ClassVar[str] = (
        "{system} may delete finished jobs, by its own clean-up or as its workers are set "
        "up, and queuebot cannot tell here that it keeps the failed ones"
    )
    # A system without a state column that keeps its succeeded jobs: a column every
    # succeeded job has set (and few others), whose share in the statistics tells triage
    # whether most of a large table succeeded, so it estimates those (``not_succeeded``).
    set_on_success: ClassVar[str | None] = None
    # Whether a change locks the rows it judges (``SELECT ... FOR UPDATE``) before it
    # changes them; not where the jobs are read through a view of the system's private
    # table and changed only by its own functions, which lock (and skip locked jobs)
    # themselves.
    locks_rows: ClassVar[bool] = True
    # Why a job the request named is no longer in the table at approval.
    gone_why: ClassVar[str] = (
        "deleted since the request: {system} removes finished jobs after a while"
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "cols" not in cls.__dict__:
            return  # an intermediate class
        cls.status_column = cls.cols.state
        if cls.success_deletes:  # a job that is gone succeeded
            cls.states = {**cls.states, GONE: CanonicalState.SUCCEEDED}
        if not cls.derived_states:  # each change writes the system's own state value
            writes = ((CanonicalState.PENDING, cls.retry_state),)
            cls.status_writes = {Action.REQUEUE: writes, Action.REDRIVE: writes}
            if cls.cancel_state is not None:
                cancelled = ((CanonicalState.CANCELLED, cls.cancel_state),)
                cls.status_writes[Action.CANCEL] = cancelled
        if "write_needs" not in cls.__dict__:  # the columns a retry and a cancel write
            retry = tuple(("job", "UPDATE", c) for c in cls.restored)
            cancel = tuple(("job", "UPDATE", c) for c in cls.restored[:1])
            cls.write_needs = {"requeue": retry, "redrive": retry, "cancel": cancel}

    # -- names: the system's schema ------------------------------------------------------

    @property
    def schema(self) -> str:
        return self.config.schema_name or self.default_schema

    def table_name(self, role: str) -> str:
        name = super().table_name(role)
        return name if "." in name else f"{self.schema}.{name}"

    # -- the system's facts, as SQL over the bound tables ---------------------------------

    def job(self, t: Mapping[str, BoundTable]) -> BoundTable:
        return t["job"]

    def col(self, t: Mapping[str, BoundTable], name: str) -> sa.Column[Any]:
        return self.job(t).c(name)

    def state_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        """A job's state in the system's words: its state column, or what its columns say."""
        return self.col(t, self.cols.state)

    def state_where(self, t: Mapping[str, BoundTable], value: str) -> sa.ColumnElement[bool]:
        """The jobs in one derived state (presets with ``derived_states`` say how)."""
        raise NotImplementedError

    def in_states(
        self, t: Mapping[str, BoundTable], values: Iterable[str]
    ) -> sa.ColumnElement[bool]:
        """The jobs in any of these states: one IN on a state column, else each derived
        state's own condition (which the system's indexes answer)."""
        wanted = list(values)
        if not self.derived_states:
            return self.col(t, self.cols.state).in_(wanted)
        known = [v for v in wanted if v in self.states and v != GONE]
        return sa.or_(*(self.state_where(t, v) for v in known)) if known else sa.false()

    def not_succeeded(self, t: Mapping[str, BoundTable], succeeded: str) -> sa.ColumnElement[bool]:
        """The jobs that are not in the succeeded state ``succeeded``, which a triage that
        estimates the succeeded ones counts (rows without a state included)."""
        if self.derived_states:
            return sa.not_(self.state_where(t, succeeded))
        state = self.col(t, self.cols.state)
        return sa.or_(sa.not_(self.in_states(t, [succeeded])), state.is_(None))

    def takes_statuses(self, role: str, column: str, values: Iterable[str]) -> list[str]:
        if self.derived_states:
            return list(values)  # names queuebot gives, not labels of a column's type
        return super().takes_statuses(role, column, values)

    def scope(self, t: Mapping[str, BoundTable]) -> list[sa.ColumnElement[bool]]:
        """The rows of this queuebot queue: the system's table, or one queue of it."""
        if self.config.queue_name is None:
            return []
        return [self.col(t, self.cols.queue) == self.config.queue_name]

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """The last attempt's error text, None where the system stores none."""
        return None

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """When a dead job died (None where the row does not say)."""
        return None

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """When a job was enqueued (None where the system does not keep it: --since is
        then refused)."""
        return None

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        """Since when a pending job may run: its schedule, else its enqueue time."""
        raise NotImplementedError

    def attempts_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        """How many times a job ran (or failed), as the system counts it."""
        return self.col(t, self.cols.attempts)

    def attempts_after_retry(self, before: int) -> int:
        """The attempts a job has right after a retry, from those it had before: the same
        (or one more, ``attempt_bump``) where the system grants one more attempt."""
        return before + self.attempt_bump

    # The states a retried job waits in until a worker takes it (a rollback returns a job
    # only from these, and only with the attempts the retry left).
    @property
    def unclaimed_states(self) -> tuple[str, ...]:
        return (self.retry_state,)

    # Why cancel is off on this system (it has no way to drop a job that queuebot would
    # call a cancel), or None.
    cancel_off: ClassVar[str | None] = None

    async def kept_elsewhere(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], ids: Sequence[Any]
    ) -> dict[str, dict[str, Any]]:
        """What a rollback must put back that is not a column of the jobs table (a row of
        another table the retry deleted), by job: nothing by default."""
        return {}

    async def restore(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        guard: sa.ColumnElement[bool],
        values: Mapping[str, Any],
    ) -> bool:
        """Give one job (the row ``guard`` selects, if it still does) the values a retry
        changed, as a rollback does; whether it did."""
        q = self.job(t)
        done = await conn.execute(
            q.table.update().where(guard).values(dict(values)).returning(q.c(self.cols.id))
        )
        return done.first() is not None

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """When a running job's current attempt started."""
        return None

    def pass_source(self, t: Mapping[str, BoundTable]) -> PassSource:
        """What triage's one pass reads: by default the jobs table with ``state_value``,
        ``error_text``, ``died_at`` and ``started_at``. A system whose state and times are
        looked up in other tables per job may join those tables instead, so the pass reads
        each of them once rather than once per job."""
        return PassSource(
            self.job(t).table,
            self.state_value(t),
            self.error_text(t),
            self.died_at(t),
            self.started_at(t),
        )

    def sample_table(self, t: Mapping[str, BoundTable]) -> sa.Table:
        """The table whose statistics say how many jobs there are (whether a triage
        samples its backlog): the jobs table itself by default."""
        return self.job(t).table

    def sampled(
        self, t: Mapping[str, BoundTable], sample: Sample
    ) -> tuple[dict[str, BoundTable], sa.ColumnElement[Any]]:
        """The tables with the jobs table read as ``sample`` of its pages, so that
        ``state_value`` and the job type read the sample's jobs, and the page each was
        read from (its ``ctid``'s block). A system read through a view (which cannot be
        sampled) gives a subquery over the sampled table with the view's columns."""
        q = self.job(t)
        page: sa.ColumnElement[Any] = sa.literal_column("(qb_sample.ctid::text::point)[0]")
        return {**t, "job": q.over(sample.of(q.table))}, page

    def oldest_pending_index(self, t: Mapping[str, BoundTable]) -> PendingIndex | None:
        """Where one of the system's own indexes holds exactly its pending jobs, leading
        with a few columns of few values and then ``waiting_since``: how triage reads the
        oldest waiting job from it in a few descents instead of a pass over the table.
        None: read it the plain way."""
        return None

    def retry_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        """What a retry writes, by column name: as the system's own retry does."""
        raise NotImplementedError

    def cancel_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        return {self.col(t, self.cols.state).name: self.cancel_state}  # a state column

    async def write(
        self,
        conn: AsyncConnection,
        t: Mapping[str, BoundTable],
        action: Action,
        guard: sa.ColumnElement[bool],
        now: datetime,
    ) -> list[tuple[Any, str]]:
        """Change the rows ``guard`` selects (already locked, still as they were judged) as
        the system would, returning (id, its queue) of each row changed."""
        q = self.job(t)
        values = (
            self.cancel_values(t, now) if action is Action.CANCEL else self.retry_values(t, now)
        )
        done = await conn.execute(
            q.table.update()
            .where(guard)
            .values(values)
            .returning(q.c(self.cols.id), q.c(self.cols.queue))
        )
        return [(r[0], str(r[1])) for r in done.all()]

    async def notify(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], changed: Sequence[tuple[Any, str]]
    ) -> None:
        """Wake the system's workers for jobs a retry made runnable: a NOTIFY in the change's
        own transaction, which PostgreSQL delivers when (and only if) it commits."""

    async def history(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], row: Mapping[Any, Any]
    ) -> tuple[list[JobEvent], str | None]:
        """A job's history as ``/queue show`` lists it, and a note where there is none."""
        return [], f"{self.system} keeps no history of a job's attempts"

    def usable(self, t: Mapping[str, BoundTable]) -> list[str]:
        """What config check says is off on this system (beyond missing columns)."""
        out = []
        if self.no_error_text is not None:
            out.append(
                f"no error text: {self.no_error_text}; triage groups no error signatures, "
                "/queue dlq shows no errors, --error-like selects nothing, and a staged redrive "
                "halts on any job that fails again rather than on a changed error"
            )
        if self.cancel_off is not None:
            out.append(f"cancel is off: {self.cancel_off}")
        return out

    # -- config check --------------------------------------------------------------------

    async def describe(self, conn: AsyncConnection) -> list[str]:
        t = await self.tables(conn)
        scope = (
            f"queue {self.config.queue_name!r} of {self.job(t).name}"
            if self.config.queue_name is not None
            else f"every queue of {self.job(t).name}"
        )
        lines = [f"preset {self.name} ({self.system}): {scope}"]
        lines.extend(await self._queue_found(conn, t))
        lines.extend(self.usable(t))
        lines.extend(await self.missing_functions(conn))
        lines.extend(await super().describe(conn))
        return lines

    async def _queue_found(self, conn: AsyncConnection, t: Mapping[str, BoundTable]) -> list[str]:
        """Where ``queue_name`` names no job of the table, say so and which queues it has:
        a mistyped name would otherwise read as an empty queue."""
        if self.config.queue_name is None:
            return []
        q, queue = self.job(t), self.col(t, self.cols.queue)
        found = await conn.execute(sa.select(sa.exists().where(queue == self.config.queue_name)))
        if found.scalar_one():
            return []
        names = (
            await conn.execute(sa.select(queue).select_from(q.table).distinct().limit(11))
        ).scalars()
        listed = sorted(str(n) for n in names)
        some = ", ".join(repr(n) for n in listed[:10]) + (", ..." if len(listed) > 10 else "")
        return [
            f"no job of {q.name} is in queue {self.config.queue_name!r} now "
            f"({'its queues: ' + some if listed else 'the table is empty'}); check "
            f"{self.config.key('queue_name')} if jobs should be there"
        ]

    async def missing_functions(self, conn: AsyncConnection) -> list[str]:
        """Changes turned off because the system's own SQL functions are missing (an older
        or newer version of it): nothing where the preset calls none."""
        return []

    def _reflect(self, conn: Connection) -> dict[str, BoundTable]:
        if conn.dialect.name != "postgresql":
            raise ConfigError(
                f"queue {self.queue!r}: the {self.name} preset reads {self.system}'s tables "
                f"in PostgreSQL, and the queue database is {conn.dialect.name}; set "
                "QUEUEBOT_QUEUE_DATABASE_URL to the PostgreSQL database the system uses"
            )
        return super()._reflect(conn)

    def index_plan(self) -> list[IndexPlan]:
        return []  # the systems ship the indexes their own workers need

    # Where the system ships no index that finds its dead jobs: the columns (logical names,
    # its queue column first) of the partial index on exactly them that `estate indexes`
    # recommends (services/estate/system/dead_index.py); None where it ships one.
    dead_index_columns: ClassVar[tuple[str, ...] | None] = None

    def dead_index_on(
        self, t: Mapping[str, BoundTable]
    ) -> tuple[sa.Table, tuple[str, ...], sa.ColumnElement[bool]] | None:
        """That index's table, columns and WHERE: the condition the reads of dead jobs
        select them by (so PostgreSQL can use it for them); None where none is recommended."""
        if self.dead_index_columns is None:
            return None
        q = self.job(t)
        where = self.in_states(t, self.dead_letter_statuses)
        return q.table, tuple(q.c(c).name for c in self.dead_index_columns), where

    # -- a job's key and the order of the dead jobs ---------------------------------------

    def key_of(self, t: Mapping[str, BoundTable], raw: str) -> Any:
        return self.coerce_id(self.col(t, self.cols.id), raw)

    def dead_order(self, tables: dict[str, BoundTable]) -> list[sa.ColumnElement[Any]]:
        died = self.died_at(tables)
        newest: list[sa.ColumnElement[Any]] = [self.col(tables, self.cols.id).desc()]
        return [died.desc().nulls_last(), *newest] if died is not None else newest
