"""Where a preset's system keeps a job's arguments (``Columns.args``: pg-boss's ``data``,
River's and Oban's ``args`` ...), for ``--args-like``: /queue dlq and a staged redrive
match them among the dead jobs (``SystemBase.dead_where``), /queue show looks a job up by
them across the queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from services.estate import args_like
from services.estate.system.reads import SystemReads
from services.estate.tables import BoundTable


class SystemArgs(SystemReads):
    """A preset's arguments column, read as its system keeps it."""

    args_absent = (
        "the system's jobs table has no arguments column here (docs/presets.md names each "
        "system's); --args-like needs it"
    )

    def arguments(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any] | None:
        """A job's arguments: the ``args`` column, where the table has it (a system keeping
        them in two columns joins them, so a match in either is found)."""
        name = self.cols.args
        return self.col(t, name) if name is not None and self.job(t).has(name) else None

    def args_where(self, tables: Mapping[str, BoundTable], text: str) -> sa.ColumnElement[bool]:
        """Over the jobs table alone (``arguments``), as ``dead_where`` reads it."""
        args = self.arguments(tables)
        return args_like.where(self.queue, args, text, absent=self.args_absent)

    def args_lookup(self, tables: Mapping[str, BoundTable]) -> args_like.Lookup | None:
        args = self.arguments(tables)
        if args is None:
            return None
        kind = self.col(tables, self.cols.kind) if self.cols.kind is not None else None
        return args_like.Lookup(
            source=self.job(tables).table,
            scope=self.scope(tables),
            id=self.col(tables, self.cols.id),
            status=self.state_value(tables),
            canonical=self.canonical,
            group=kind,
            args=args,
        )
