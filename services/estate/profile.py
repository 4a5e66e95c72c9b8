"""The queue-profile interface: how queuebot reads and changes a team's own queue tables.

A profile knows the table and column names of one queue design (a single worker table,
or messages + jobs), maps its states onto ``CanonicalState`` and implements the reads
with SQLAlchemy Core over reflected tables, so every value is a bound parameter and every
name comes from validated configuration. Each profile is one package under
``services/estate/`` holding its DDL, reads, guarded writes (``changes``, a
``RowChanges``) and staged-redrive operations (``plan_ops``, a ``PlanOps``); the
registry (``registry.py``) names them.
"""

from __future__ import annotations

import asyncio
import enum
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.errors import ConfigError, UsageError
from services.estate.model import (
    CanonicalState,
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobList,
    Triage,
)
from services.estate.ops import PlanOps, RowChanges

_UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_INT_ID = re.compile(r"^-?[0-9]{1,18}\Z")


@dataclass(frozen=True)
class TableSpec:
    """A table a profile needs: its role, default name and the columns it reads."""

    role: str
    default: str
    columns: tuple[str, ...]


# (table role, short name, columns, optional (column, status values) filter, why)
IndexPlan = tuple[str, str, tuple[str, ...], tuple[str, tuple[str, ...]] | None, str]


class BoundTable:
    """A reflected table with the profile's logical column names resolved."""

    def __init__(self, table: sa.Table, names: Mapping[str, str], dialect: str) -> None:
        self.table = table
        self._names = dict(names)
        self.dialect = dialect

    def c(self, logical: str) -> sa.Column[Any]:
        return self.table.c[self._names[logical]]

    def isin(self, logical: str, values: Sequence[Any]) -> sa.ColumnElement[bool]:
        """``column IN (values)``; on PostgreSQL ``column = ANY(array)``: one parameter
        however many values, so ten thousand ids cost one bind, not ten thousand."""
        column = self.c(logical)
        if self.dialect != "postgresql":
            return column.in_(values)
        if isinstance(column.type, sa.Uuid):  # a text[] cast server-side dumps faster
            texts = sa.literal([str(v) for v in values], postgresql.ARRAY(sa.Text))
            return column == sa.any_(sa.cast(texts, postgresql.ARRAY(column.type)))
        return column == sa.any_(sa.literal(list(values), postgresql.ARRAY(column.type)))

    @property
    def name(self) -> str:
        return self.table.fullname


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


class QueueProfile(ABC):
    """One queue design. Subclasses declare their tables, implement the reads, and set
    ``changes`` and ``plan_ops`` to their write operations when constructed."""

    name: ClassVar[str]
    specs: ClassVar[tuple[TableSpec, ...]]
    states: ClassVar[Mapping[str, CanonicalState]]
    # The main table's column (by its logical name) that holds the states above.
    status_column: ClassVar[str] = "status"
    changes: RowChanges
    plan_ops: PlanOps

    @classmethod
    def ddl(cls, dialect: str) -> str:
        """The profile's shipped DDL (``ddl/postgresql.sql`` or ``ddl/sqlite.sql`` in its
        package): what ``queuebot demo`` and the tests build."""
        package = cls.__module__.rpartition(".")[0]
        name = "postgresql.sql" if dialect == "postgresql" else "sqlite.sql"
        return resources.files(package).joinpath("ddl", name).read_text("utf-8")

    def __init__(self, queue: str, config: QueueConfig) -> None:
        self.queue = queue
        self.config = config
        self._tables: dict[str, BoundTable] | None = None
        self._reflecting: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        roles = {spec.role for spec in self.specs}
        for key in config.tables:
            if key not in roles:
                raise ConfigError(
                    f"queues.{queue}.tables.{key}: unknown table role for profile "
                    f"{self.name}; expected one of {', '.join(sorted(roles))}"
                )
        for key in config.columns:
            role, _, column = key.partition(".")
            spec = next((s for s in self.specs if s.role == role), None)
            if spec is None or column not in spec.columns:
                raise ConfigError(
                    f"queues.{queue}.columns.{key}: profile {self.name} has no column "
                    f"{key!r}; columns are named 'role.column', e.g. "
                    f"'{self.specs[0].role}.{self.specs[0].columns[0]}'"
                )

    # -- names -------------------------------------------------------------------------

    def table_name(self, role: str) -> str:
        if role in self.config.tables:
            return self.config.tables[role]
        if self.config.table and role == self.specs[0].role:
            return self.config.table
        return next(s.default for s in self.specs if s.role == role)

    def column_name(self, role: str, column: str) -> str:
        return self.config.columns.get(f"{role}.{column}", column)

    def canonical(self, status: str | None) -> CanonicalState:
        if status is None:
            return CanonicalState.UNKNOWN
        return self.states.get(status, CanonicalState.UNKNOWN)

    @property
    def dead_letter_statuses(self) -> tuple[str, ...]:
        """The statuses a redrive takes rows out of (the dead-letter count)."""
        return tuple(self.statuses_in(CanonicalState.DEAD, CanonicalState.FAILED))

    def dead_count(self, counts: Mapping[str, int]) -> int:
        """Of rows per status, how many are dead letters (what a redrive takes out)."""
        return sum(counts.get(s, 0) for s in self.dead_letter_statuses)

    async def status_counts(self, conn: AsyncConnection) -> dict[str, int]:
        """Rows per status of the main table: one GROUP BY an index can answer."""
        main = (await self.tables(conn))[self.specs[0].role]
        status = main.c(self.status_column)
        rows = (await conn.execute(sa.select(status, sa.func.count()).group_by(status))).all()
        return count_map(rows)

    def statuses_in(self, *states: CanonicalState) -> list[str]:
        return [status for status, state in self.states.items() if state in states]

    # -- reflection --------------------------------------------------------------------

    async def tables(self, conn: AsyncConnection) -> dict[str, BoundTable]:
        """Reflect the estate's tables once, checking every column the profile needs.
        Callers that arrive together (the first burst of commands after a start) wait for
        one reflection instead of each running its own."""
        if self._tables is not None:
            return self._tables
        loop = asyncio.get_running_loop()
        if self._reflecting is None or self._reflecting[0] is not loop:
            self._reflecting = (loop, asyncio.Lock())  # a lock belongs to one event loop
        async with self._reflecting[1]:
            if self._tables is None:
                self._tables = await conn.run_sync(self._reflect)
        return self._tables

    def _reflect(self, conn: Connection) -> dict[str, BoundTable]:
        metadata = sa.MetaData()
        bound: dict[str, BoundTable] = {}
        for spec in self.specs:
            full = self.table_name(spec.role)
            schema, _, name = full.rpartition(".")
            try:
                table = sa.Table(name, metadata, autoload_with=conn, schema=schema or None)
            except NoSuchTableError as exc:
                raise ConfigError(
                    f"queue {self.queue!r} ({self.name}): table {full!r} does not exist in "
                    "the queue database. Run `queuebot demo` to build the demo estate, or "
                    "point QUEUEBOT_QUEUE_DATABASE_URL and [queue] at your own tables."
                ) from exc
            names = {col: self.column_name(spec.role, col) for col in spec.columns}
            missing = [
                f"{col} (as {actual!r})" if actual != col else col
                for col, actual in names.items()
                if actual not in table.c
            ]
            if missing:
                raise ConfigError(
                    f"queue {self.queue!r} ({self.name}): table {full!r} lacks column(s) "
                    f"{', '.join(missing)}; rename them with [queue.columns] "
                    f'"{spec.role}.<column>" = "<actual name>"'
                )
            bound[spec.role] = BoundTable(table, names, conn.dialect.name)
        return bound

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

    def id_text(self, column: sa.Column[Any], raw: str) -> str:
        """Like ``coerce_id`` but as canonical text, for bulk statements that bind ids as
        one text array: canonical UUIDs skip building ten thousand UUID objects."""
        if isinstance(column.type, sa.Uuid):
            lowered = raw.lower()
            if _UUID_TEXT.match(lowered):
                return lowered
        return str(self.coerce_id(column, raw))

    # -- reads ---------------------------------------------------------------------------

    @abstractmethod
    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
    ) -> Triage: ...

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

    @abstractmethod
    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList: ...

    @abstractmethod
    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]: ...

    def stuck_cutoff(self, now: datetime) -> datetime:
        return now - timedelta(minutes=self.config.stuck_after_minutes)


def count_map(rows: Sequence[sa.Row[Any]]) -> dict[str, int]:
    return {str(plain(r[0])): int(r[1]) for r in rows}
