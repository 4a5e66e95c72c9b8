"""A profile's tables as the team's database has them: the names configuration gives
them, and their reflection, checked once against what the profile declares
(``TableSpec``) and kept; readiness checks them afresh, privileges included.
``ProfileTables`` is this part of ``QueueProfile``."""

from __future__ import annotations

import asyncio
from abc import ABC
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.errors import ConfigError
from services.estate import hints
from services.estate.tables import BoundTable, TableSpec


class ProfileTables(ABC):
    """The tables of one queue of a profile (``QueueProfile`` is the whole profile)."""

    name: ClassVar[str]
    specs: ClassVar[tuple[TableSpec, ...]]

    def __init__(self, queue: str, config: QueueConfig) -> None:
        self.queue = queue
        self.config = config
        self._tables: dict[str, BoundTable] | None = None
        self._reflecting: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        roles = {spec.role for spec in self.specs}
        for key in config.tables:
            if key not in roles:
                raise ConfigError(
                    f"{config.key(f'tables.{key}')}: unknown table role for profile "
                    f"{self.name}; expected one of {', '.join(sorted(roles))}"
                )
        for key in config.columns:
            role, _, column = key.partition(".")
            spec = next((s for s in self.specs if s.role == role), None)
            if spec is None or column not in spec.columns:
                raise ConfigError(
                    f"{config.key(f'columns.{key}')}: profile {self.name} has no column "
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

    async def check_access(self, conn: AsyncConnection) -> None:
        """What readiness asks, afresh each time (never from the kept reflection): every
        table and column the profile needs is there, and on PostgreSQL this connection's
        role may read each column queuebot reads. Raises ``ConfigError`` naming the queue,
        what is missing and the fix: a table or column as ``tables`` does, a missing
        privilege with the GRANT that gives it."""
        bound = await conn.run_sync(self._reflect)
        if conn.dialect.name != "postgresql" or not bound:
            return
        quote = conn.dialect.identifier_preparer.format_table
        pairs = [(quote(t.table), t.name, column) for t in bound.values() for column in t.used]
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT x.t, x.c, current_user FROM unnest(CAST(:tables AS text[]), "
                    "CAST(:columns AS text[])) AS x(t, c) "
                    "WHERE NOT has_column_privilege(x.t, x.c, 'SELECT')"
                ),
                {"tables": [q for q, _, _ in pairs], "columns": [c for _, _, c in pairs]},
            )
        ).all()
        if not rows:
            return
        role = str(rows[0][2])
        denied: dict[str, list[str]] = {}  # quoted table -> its columns the role may not read
        for quoted, column, _ in rows:
            denied.setdefault(str(quoted), []).append(str(column))
        names = {quoted: name for quoted, name, _ in pairs}
        parts = []
        for quoted, columns in denied.items():
            every = [c for q, _, c in pairs if q == quoted]
            parts.append(
                f"table {names[quoted]!r}"
                if len(columns) == len(every)
                else f"column(s) {', '.join(columns)} of table {names[quoted]!r}"
            )
        owner = "table's owner grants it" if len(denied) == 1 else "tables' owner grants them"
        raise ConfigError(
            f"queue {self.queue!r} ({self.name}): role {role!r} lacks the SELECT privilege on "
            f"{'; '.join(parts)}, so the queue cannot be read; the {owner} "
            f"(GRANT SELECT ON {', '.join(denied)} TO "
            f"{conn.dialect.identifier_preparer.quote(role)})"
        )

    @property
    def reflected(self) -> dict[str, BoundTable] | None:
        """The tables once ``tables`` has reflected them, else None."""
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
                if spec.absent is not None and spec.role not in self.config.tables:
                    continue  # an optional table this team does not keep
                raise ConfigError(
                    hints.missing_table(
                        self.queue,
                        self.name,
                        self.config,
                        spec.role,
                        full,
                        existing=hints.table_names(conn, schema),
                        main=self.specs[0].role,
                    )
                ) from exc
            names = {col: self.column_name(spec.role, col) for col in spec.columns}
            renamed = {c for c in spec.columns if f"{spec.role}.{c}" in self.config.columns}
            missing = [
                f"{col} (as {names[col]!r})" if col in renamed else col
                for col in spec.columns
                if names[col] not in table.c and (col in spec.required or col in renamed)
            ]
            if missing:
                raise ConfigError(
                    f"queue {self.queue!r} ({self.name}): table {full!r} lacks column(s) "
                    f"{', '.join(missing)}; rename them with [{self.config.section or 'queue'}"
                    ".columns] "
                    f'"{spec.role}.<column>" = "<actual name>" (docs/profiles.md lists '
                    "which columns are required)"
                )
            present = {col: actual for col, actual in names.items() if actual in table.c}
            absent = [col for col in spec.optional if col not in present]
            bound[spec.role] = BoundTable(table, present, conn.dialect.name, absent)
        return bound
