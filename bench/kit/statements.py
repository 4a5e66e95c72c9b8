"""Every SQL statement an engine sends while a run is timed, with its parameters and how
long it took (SQLAlchemy's cursor events): what a measured call spent in the database,
statement by statement."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

# (the words a statement holds, all of them, what it is): the first that fits names it
Rule = tuple[tuple[str, ...], str]


def label(sql: str, rules: Sequence[Rule]) -> str:
    """What a statement of a triage is: the snapshot's and the lane's settings, the
    table size estimate, or the first of ``rules`` whose words it holds (else its start)."""
    s = " ".join(sql.split())
    if s.startswith(("SET ", "SELECT pg_export_snapshot")):
        return "snapshot export/import and session settings"
    if "pg_class" in s:
        return "table size estimate (pg_class)"
    return next((name for words, name in rules if all(w in s for w in words)), s[:60])


@dataclass
class Statement:
    sql: str
    params: Any
    seconds: float

    def flat(self, width: int = 110) -> str:
        """The statement on one line, cut at ``width`` characters."""
        return " ".join(self.sql.split())[:width]


@dataclass
class StatementTimer:
    """Times every cursor execution on the engine while ``active``, one list a run."""

    active: bool = False
    runs: list[list[Statement]] = field(default_factory=list)
    # keep each statement's parameters (to EXPLAIN it again later); False: only its text
    # and time, so a run's large parameters (100,000 ids) are not held after it
    params: bool = True

    def attach(self, engine: AsyncEngine) -> None:
        event.listen(engine.sync_engine, "before_cursor_execute", self._before)
        event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    def start_run(self) -> None:
        self.active = True
        self.runs.append([])

    def stop(self) -> None:
        self.active = False

    def slowest(self, n: int) -> list[Statement]:
        """The last run's ``n`` slowest statements, slowest first."""
        return sorted(self.runs[-1], key=lambda s: -s.seconds)[:n] if self.runs else []

    def _before(self, conn: Any, _cursor: Any, *_args: Any) -> None:
        conn.info.setdefault("qb_bench_t0", []).append(time.perf_counter())

    def _after(self, conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        started = conn.info["qb_bench_t0"].pop()
        if self.active:
            kept = parameters if self.params else None
            self.runs[-1].append(Statement(statement, kept, time.perf_counter() - started))
