"""The queue-profile interface: how queuebot reads and changes a team's own queue tables.

A profile knows the table and column names of one queue design (a single worker table,
or messages + jobs), maps its states onto ``CanonicalState`` and implements the reads
with SQLAlchemy Core over reflected tables, so every value is a bound parameter and every
name comes from validated configuration (its tables' names and reflection are
``reflection.ProfileTables``). Each profile is one package under ``services/estate/``
holding its DDL, reads, triage (``triage_reads``, a ``TriageReads``), guarded writes
(``changes``, a ``RowChanges``), staged-redrive operations (``plan_ops``, a ``PlanOps``),
what housekeeping may do on it (``housekeeping_parts`` or ``housekeeping_report``) and
its part of the demo (``demo()``); the registry (``registry.py``) names them, and
nothing else asks a profile's name.
"""

from __future__ import annotations

import enum
import re
import uuid
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.errors import ConfigError, PreconditionFailed, UsageError
from services.estate import args_like
from services.estate.deleted_jobs import SOMETHING_ELSE, DeletedJobs, judge
from services.estate.labels import lacking, lacking_note, unwritable_label
from services.estate.model import (
    DEAD_LETTER_STATES,
    CanonicalState,
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobList,
    Triage,
)
from services.estate.ops import Action, PlanOps, RowChanges
from services.estate.reflection import ProfileTables
from services.estate.tables import UUID_TEXT, BoundTable, IndexPlan, uuid_texts
from services.estate.triage import TriageReads

if TYPE_CHECKING:
    from services.estate.demo_kit import ProfileDemo
    from services.estate.housekeeping import HousekeepingParts, HousekeepingReport

# A privilege a change kind needs on a profile's table: (table role, privilege, the
# column it needs it on, or None where it needs it on the table).
Need = tuple[str, str, str | None]
_INT_ID = re.compile(r"^-?[0-9]{1,18}\Z")


def as_utc(value: datetime | None) -> datetime | None:
    """Timestamps from SQLite come back naive; queuebot stores and reads UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def plain(value: Any) -> Any:
    """A database value as something every renderer can print."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def row_dict(row: sa.Row[Any]) -> dict[str, object]:
    return {key: plain(value) for key, value in row._mapping.items()}


class QueueProfile(ProfileTables):
    """One queue design. Subclasses declare their tables, implement the reads, and set
    ``triage_reads`` to their triage and ``changes`` and ``plan_ops`` to their write
    operations when constructed (and ``housekeeping_parts`` or ``housekeeping_report``
    where housekeeping does something on them)."""

    states: ClassVar[Mapping[str, CanonicalState]]
    # The main table's column (by its logical name) that holds the states above.
    status_column: ClassVar[str] = "status"
    # The status values each change writes, with their states: a change is refused where
    # the team's [statuses] maps that state without the value (see ``unwritable``).
    status_writes: ClassVar[Mapping[Action, tuple[tuple[CanonicalState, str], ...]]] = {}
    # What each change kind needs on the tables (``write_access`` checks the role has it).
    write_needs: ClassVar[Mapping[str, tuple[Need, ...]]] = {}
    triage_reads: TriageReads
    changes: RowChanges
    plan_ops: PlanOps
    # What housekeeping may do on the queue: change rows (its parts), or report on it
    # without a change; None where the profile offers it nothing of the kind.
    housekeeping_parts: HousekeepingParts | None = None
    housekeeping_report: HousekeepingReport | None = None
    # The canonical states of the rows /queue dlq lists and a redrive takes out: failed
    # and dead on queuebot's own profiles (their failed rows wait for a person or the
    # retry worker); a preset's dead state alone (its system retries its failed jobs).
    dead_letter_states: ClassVar[tuple[CanonicalState, ...]] = DEAD_LETTER_STATES
    # Whether this profile is a preset (a job-queue system's own tables), not a profile.
    preset: ClassVar[bool] = False
    # The failure reasons --failure-reason takes, where the queue keeps them: its fixed
    # list; () where it keeps none; None where they are any text (no fixed list).
    failure_reasons: ClassVar[tuple[str, ...] | None] = ()
    # What the attempts column of /queue dlq and the stuck report counts, as its header
    # says it: "tries" where it counts a job's attempts; "retries" where it counts only
    # those after the first (pg-boss's retry_count, worker_queue's); "errors" where the
    # failed ones (Que's error_count).
    attempts_label: ClassVar[str] = "tries"
    # Why the queue keeps no error text, in the profile's words, where it keeps none
    # (Procrastinate's errors are in its workers' logs): a halted plan says so rather than
    # judge whether its jobs died of the same cause.
    no_error_text: ClassVar[str | None] = None
    # Where the system deletes a job when it succeeds and keeps a failed one (graphile-worker,
    # Que): a redriven job whose row is gone succeeded, a fact no setting changes.
    success_deletes: ClassVar[bool] = False
    # Otherwise, what may delete the queue's jobs, failed ones too ("{system}": the system's
    # name): a redriven job whose row is gone has an unknown outcome unless the queue's
    # ``deleted_jobs`` says it succeeded.
    deleted_by: ClassVar[str] = SOMETHING_ELSE

    @classmethod
    def ddl(cls, dialect: str) -> str:
        """The profile's shipped DDL (``ddl/postgresql.sql`` or ``ddl/sqlite.sql`` in its
        package): what ``queuebot demo`` and the tests build."""
        package = cls.__module__.rpartition(".")[0]
        name = "postgresql.sql" if dialect == "postgresql" else "sqlite.sql"
        return resources.files(package).joinpath("ddl", name).read_text("utf-8")

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self._statuses: dict[str, list[str]] = {str(k): v for k, v in config.statuses.items()}
        self._check_status_mapping()
        self.state_map = self.mapped_states(self.states)
        # what a redriven job whose row left the table means here (refused where it is a
        # fact of the system and configured all the same); a preset names its system
        system = str(getattr(self, "system", self.name))
        self.deleted_jobs: DeletedJobs = judge(
            queue=queue,
            config=config,
            system=system,
            fixed=self.success_deletes,
            words=self.deleted_by.format(system=system),
        )

    # -- states --------------------------------------------------------------------------

    @classmethod
    def status_vocabularies(cls) -> list[tuple[str, str, Mapping[str, CanonicalState]]]:
        """Each status column the profile reads, as (table role, logical column, its own
        values and their states); the first is the main table's ``status_column``."""
        return [(cls.specs[0].role, cls.status_column, cls.states)]

    def _check_status_mapping(self) -> None:
        vocabularies = self.status_vocabularies()
        known = {state for _, _, own in vocabularies for state in own.values()}
        for name, values in self._statuses.items():
            state = CanonicalState(name)
            where = self.config.key(f"statuses.{name}")
            if state not in known:
                states = ", ".join(s.value for s in CanonicalState if s in known)
                raise ConfigError(
                    f"{where}: profile {self.name} has no {name} state to map values onto; "
                    f"its states are {states}"
                )
            for value in values:
                for role, column, own in vocabularies:
                    if state in own.values() and value in own and own[value] is not state:
                        raise ConfigError(
                            f"{where}: {value!r} is {self.name}'s own value for "
                            f"{own[value].value} ({role}.{column}); [statuses] adds values "
                            "meaning the same as the profile's, it cannot move one to "
                            "another state"
                        )

    def mapped_states(self, own: Mapping[str, CanonicalState]) -> dict[str, CanonicalState]:
        """A status column's own values with the team's ``[statuses]`` values added, each
        only for a state the column has (message_job's messages have no failed state, its
        jobs no dead one). A value in neither stays unknown and is never acted on."""
        merged = dict(own)
        states = set(own.values())
        for name, values in self._statuses.items():
            state = CanonicalState(name)
            if state in states:
                for value in values:
                    merged.setdefault(value, state)
        return merged

    def unwritable(self, writes: Iterable[tuple[CanonicalState, str]]) -> str | None:
        """Why a change writing these (state, value) pairs would write a value the team's
        table may not take, or None. The profile's own value is written only where its
        state is unmapped (the team keeps the shipped values) or the mapping lists it, and
        only where the status column's type takes it (an enum lacking it refuses it)."""
        for state, value in writes:
            mapped = self._statuses.get(state.value)
            if mapped is not None and value not in mapped:
                listed = ", ".join(repr(v) for v in mapped)
                return (
                    f"it writes {state.value} as {value!r}, and [statuses] {state.value} "
                    f"lists {listed} but not {value!r}; add {value!r} there if your table "
                    "takes it"
                )
            # the status column whose own values hold it (the main table's by default)
            vocabularies = self.status_vocabularies()
            role, column, _ = next((v for v in vocabularies if value in v[2]), vocabularies[0])
            table = self._tables.get(role) if self._tables is not None else None
            labels = table.labels(column) if table is not None else None
            if table is not None and labels is not None and lacking(labels, [value]):
                where = f"{table.name}.{table.c(column).name}"
                return unwritable_label(labels, where, state.value, value)
        return None

    def takes_statuses(self, role: str, column: str, values: Iterable[str]) -> list[str]:
        """Of ``values``, those the reflected ``role.column`` can hold (all of them before
        reflection, or where the column is not an enum): every status list a read or a
        change puts into SQL goes through here (``statuses_in``)."""
        table = self._tables.get(role) if self._tables is not None else None
        return table.takes(column, values) if table is not None else list(values)

    def check_writable(self, action: Action) -> None:
        """Refuse a change that would write a status value the team's table may not take."""
        problem = self.unwritable(self.status_writes.get(action, ()))
        if problem is not None:
            raise PreconditionFailed(f"{action.value} on queue {self.queue!r} is off: {problem}")

    def canonical(self, status: str | None) -> CanonicalState:
        if status is None:
            return CanonicalState.UNKNOWN
        return self.state_map.get(status, CanonicalState.UNKNOWN)

    @property
    def dead_letter_statuses(self) -> tuple[str, ...]:
        """The statuses a redrive takes rows out of: the main table's failed and dead
        values, mapped ones included (what /queue dlq lists and triage's headline counts)."""
        return tuple(self.statuses_in(*self.dead_letter_states))

    def dead_count(self, counts: Mapping[str, int]) -> int:
        """Of rows per status, how many are dead letters (what a redrive takes out)."""
        return sum(counts.get(s, 0) for s in self.dead_letter_statuses)

    async def dead_rows(self, conn: AsyncConnection) -> int:
        """How many rows are dead letters now (``dead_rows_query``, run)."""
        return int((await conn.execute(await self.dead_rows_query(conn))).scalar_one())

    async def dead_rows_query(self, conn: AsyncConnection) -> sa.Select[tuple[int]]:
        """One count of the dead letters' statuses, which an index on the status column
        answers from the dead rows alone (not a count of every status)."""
        main = (await self.tables(conn))[self.specs[0].role]
        dead = main.c(self.status_column).in_(self.dead_letter_statuses)
        return sa.select(sa.func.count()).select_from(main.table).where(dead)

    async def status_counts(self, conn: AsyncConnection) -> dict[str, int]:
        """Rows per status of the main table: one GROUP BY an index can answer."""
        main = (await self.tables(conn))[self.specs[0].role]
        status = main.c(self.status_column)
        rows = (await conn.execute(sa.select(status, sa.func.count()).group_by(status))).all()
        return count_map(rows)

    def statuses_in(self, *states: CanonicalState) -> list[str]:
        """The main table's statuses in these states, mapped ones included, that its status
        column can hold (an enum type may lack some: those match nothing)."""
        wanted = [status for status, state in self.state_map.items() if state in states]
        return self.takes_statuses(self.specs[0].role, self.status_column, wanted)

    async def describe(self, conn: AsyncConnection) -> list[str]:
        """What ``queuebot config check`` says of this queue beyond "its tables are there":
        the status mapping in effect, changes a mapping turns off, what each absent
        optional table or column turns off, and what a job that left the table means."""
        tables = await self.tables(conn)
        lines: list[str] = []
        for role, column, own in self.status_vocabularies():
            bound = tables.get(role)
            has = bound is not None and bound.has(column)
            if bound is None:
                where = role
            elif has:
                where = f"{bound.name}.{bound.c(column).name}"
            else:  # a preset whose states are what other columns say
                where = f"{bound.name} (from its columns: it has no state column)"
            merged = self.mapped_states(own)
            labels = bound.labels(column) if bound is not None and has else None
            missing = lacking(labels, merged)
            parts = []
            for state in CanonicalState:
                values = [v for v, s in merged.items() if s is state and v not in missing]
                if values:
                    added = [v for v in values if v not in own]
                    note = f" ({', '.join(added)} from [statuses])" if added else ""
                    parts.append(f"{state.value} = {', '.join(values)}{note}")
            typed = f"; {lacking_note(labels, missing)}" if labels is not None and missing else ""
            lines.append(
                f"statuses of {where}: {'; '.join(parts)}; any other value is unknown and "
                f"never acted on{typed}"
            )
        for action, writes in self.status_writes.items():
            problem = self.unwritable(writes)
            if problem is not None:
                lines.append(f"{action.value} is off: {problem}")
        off = 0
        for spec in self.specs:
            table = tables.get(spec.role)
            if table is None:
                off += 1
                lines.append(f"no {spec.role} table ({self.table_name(spec.role)}): {spec.absent}")
                continue
            for col in table.missing:
                off += 1
                actual = self.column_name(spec.role, col)
                lines.append(f"no column {table.name}.{actual}: {spec.optional[col]}")
        if not off:
            lines.append("every optional table and column is present: nothing is turned off")
        lines.append(self.deleted_jobs.line())
        return lines

    def demo(self) -> ProfileDemo | None:
        """The profile's part of ``queuebot demo`` for this queue, None where it has none."""
        return None

    def index_plan(self) -> list[IndexPlan]:
        """Indexes that make this profile's reads fast (see ``estate/indexes.py``)."""
        return []

    # -- ids -----------------------------------------------------------------------------

    def coerce_id(self, column: sa.Column[Any], raw: str) -> Any:
        """Turn a typed id into the column's type, or explain why it cannot be one."""
        kind = column.type
        if isinstance(kind, sa.Integer):
            if not _INT_ID.match(raw):
                raise UsageError(
                    f"{raw!r} is not a job id in queue {self.queue!r}: ids there "
                    "are whole numbers, e.g. 1234"
                )
            return int(raw)
        if isinstance(kind, sa.Uuid):
            try:
                return uuid.UUID(raw)
            except ValueError as exc:
                raise UsageError(
                    f"{raw!r} is not a job id in queue {self.queue!r}: ids there are UUIDs, "
                    "e.g. 3f2c9a1e-8d4b-4c1a-9e7f-0a1b2c3d4e5f"
                ) from exc
        return raw

    def id_texts(self, column: sa.Column[Any], raws: Iterable[str]) -> list[str]:
        """``id_text`` of each: the column's type is looked at once, not once per id."""
        if isinstance(column.type, sa.Uuid):
            return uuid_texts(list(raws), lambda raw: str(self.coerce_id(column, raw)))
        return [self.id_text(column, raw) for raw in raws]

    def id_text(self, column: sa.Column[Any], raw: str) -> str:
        """Like ``coerce_id`` but as canonical text, for bulk statements that bind ids as
        one text array: canonical UUIDs skip building ten thousand UUID objects."""
        if isinstance(column.type, sa.Uuid):
            lowered = raw.lower()
            if UUID_TEXT.match(lowered):
                return lowered
        return str(self.coerce_id(column, raw))

    # -- reads ---------------------------------------------------------------------------

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        """The queue's breakdowns, as the profile's ``triage_reads`` reads them."""
        reads = self.triage_reads
        return await reads.triage(conn, now=now, since=since, job_type=job_type, exact=exact)

    @abstractmethod
    async def show(self, conn: AsyncConnection, *, job_id: str) -> JobDetail: ...

    @abstractmethod
    async def dead(self, conn: AsyncConnection, *, filters: DeadFilter) -> JobList: ...

    @abstractmethod
    def dead_where(
        self, tables: dict[str, BoundTable], filters: DeadFilter
    ) -> list[sa.ColumnElement[bool]]:
        """The dead letters ``filters`` picks: /queue dlq lists them and a staged redrive
        selects them with this one definition, so the two cannot disagree."""

    @abstractmethod
    def dead_order(self, tables: dict[str, BoundTable]) -> list[sa.ColumnElement[Any]]:
        """Newest dead letters first."""

    # Why a queue without a job's arguments refuses --args-like.
    args_absent: ClassVar[str] = args_like.NO_ARGS

    def args_lookup(self, tables: Mapping[str, BoundTable]) -> args_like.Lookup | None:
        """Where a job's arguments are kept, None where the queue keeps none (then
        ``--args-like`` is refused, saying ``args_absent``)."""
        return None

    def args_where(self, tables: Mapping[str, BoundTable], text: str) -> sa.ColumnElement[bool]:
        """The jobs whose arguments hold ``text``: ``dead_where`` adds it for --args-like."""
        how = self.args_lookup(tables)
        args = how.args if how is not None else None
        return args_like.where(self.queue, args, text, absent=self.args_absent)

    async def find_by_args(self, conn: AsyncConnection, *, text: str) -> args_like.ArgsFound:
        """``/queue show --args-like``: the jobs whose arguments hold ``text``."""
        how = self.args_lookup(await self.tables(conn))
        if how is None:
            raise UsageError(f"queue {self.queue!r}: {self.args_absent}")
        return await args_like.look_up(conn, self.queue, how, text)

    @abstractmethod
    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList: ...

    @abstractmethod
    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]: ...

    def stuck_cutoff(self, now: datetime) -> datetime:
        return now - timedelta(minutes=self.config.stuck_after_minutes)

    # -- gauges (GET /metrics and the periodic queue sample) ---------------------------------

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        """When the oldest pending row was queued (None: nothing is pending), as triage
        reports it: the one lookup the profile's ``triage_reads`` makes for it."""
        return await self.triage_reads.oldest_pending_at(conn)

    async def failure_reason_counts(self, conn: AsyncConnection) -> dict[str, int] | None:
        """Rows in the failed state (the main table's canonical failed statuses, mapped
        ones included; not the dead ones) per failure reason, a row without one under
        ``NO_REASON``. None, the default, where the queue keeps no failure reason."""
        return None


def count_map(rows: Sequence[sa.Row[Any]]) -> dict[str, int]:
    return {str(plain(r[0])): int(r[1]) for r in rows}
