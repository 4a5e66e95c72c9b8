"""What housekeeping may do on a queue, as its profile declares it.

A profile offers housekeeping at most two things, each None where it has none:

``HousekeepingParts``   the parts (A-F of the queue-failure runbook) that change the
                        profile's rows, each a guarded set-based statement (``Change``) on
                        one table; a part the team's table cannot take is ``Skipped``.
``HousekeepingReport``  the words of a report on the queue that changes nothing.

Housekeeping (``services/housekeeping/``) runs the statements, audits them and raises
the notices; it never asks which profile a queue has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from services.config.housekeeping import HousekeepingConfig
from services.estate.tables import BoundTable


@dataclass(frozen=True)
class Change:
    """One guarded statement of a part: the rows it may touch (``where``, the guard),
    what it writes (``values``; or a delete) and what to tell of each row (``facts``). A
    dry run SELECTs the guard's rows, a real run UPDATEs (or DELETEs) the same guard
    RETURNING the rows it changed, so the two list the same rows by construction."""

    part: str
    what: str  # e.g. "released to queued"
    where: Sequence[sa.ColumnElement[bool]]
    values: Mapping[str, Any] | None  # None: delete the rows
    facts: Mapping[str, sa.ColumnElement[Any]] = field(default_factory=dict)  # as before it
    after: Mapping[str, sa.ColumnElement[Any]] = field(default_factory=dict)  # as after it
    what_of: Callable[[Mapping[str, Any]], str] | None = None  # splits the rows' report


@dataclass(frozen=True)
class Skipped:
    part: str
    why: str


class HousekeepingParts(ABC):
    """The parts housekeeping may run on one table of the profile (``role``): each part a
    list of guarded statements, never attempted where the table lacks what it needs.

    Part B retries failed rows and retires the retry-exhausted ones (``exhausted_where``,
    ``retire``) once a human is told; Part F re-routes the rows of nodes that failed too
    often (``tripped_where``, ``trip_rule``, ``reroute``). The other parts are ``changes``
    alone. Each method is given the ``[housekeeping]`` settings and reads from them the
    thresholds its profile owns (worker_queue's: ``WorkerQueueSettings``); housekeeping
    itself reads none of them."""

    role: ClassVar[str]  # the table the parts change
    titles: ClassVar[Mapping[str, str]]  # each part's title, by its letter
    queued: ClassVar[str]  # the status a row put back to wait for a worker gets
    retired: ClassVar[str]  # the status a retry-exhausted row is retired to
    tripped_by: ClassVar[str]  # the failure that counts against a node (Part F)

    @abstractmethod
    def skipped(self, q: BoundTable, part: str) -> Skipped | None:
        """Why ``part`` cannot run on this table (a missing column, an unwritable
        status), or None."""

    @abstractmethod
    def changes(
        self, q: BoundTable, part: str, config: HousekeepingConfig, now: datetime
    ) -> list[Change]:
        """The part's statements (Part B: the retries; Part F: none, see ``reroute``)."""

    @abstractmethod
    def exhausted_where(self, q: BoundTable) -> list[sa.ColumnElement[bool]]:
        """The guard of retry-exhausted rows."""

    @abstractmethod
    def exhausted_facts(self, q: BoundTable) -> dict[str, sa.ColumnElement[Any]]:
        """What a notice tells of a retry-exhausted row (``retry``, ``max_retries``,
        ``reason``, ``error`` and, where the table has them, ``issue`` and more)."""

    @abstractmethod
    def retry_at(self, q: BoundTable) -> sa.ColumnElement[Any]:
        """When a row's next attempt was due: part of its exhaustion's idempotency key."""

    @abstractmethod
    def retire(self, q: BoundTable, notified: Sequence[Any]) -> list[Change]:
        """Retire the retry-exhausted rows a human was told of, and only those."""

    @abstractmethod
    def node(self, q: BoundTable) -> sa.ColumnElement[Any]:
        """The column naming the node a row ran on."""

    @abstractmethod
    def tripped_where(
        self, q: BoundTable, config: HousekeepingConfig, now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        """The recent failures that count against a node (Part F)."""

    @abstractmethod
    def trip_rule(self, config: HousekeepingConfig) -> tuple[int, timedelta]:
        """How many ``tripped_by`` failures on one node within how long make it
        unavailable (Part F)."""

    @abstractmethod
    def release_note(self, config: HousekeepingConfig) -> str:
        """What the notice of the rows Part D released says of them."""

    @abstractmethod
    def reroute(
        self, q: BoundTable, config: HousekeepingConfig, now: datetime, nodes: Sequence[str]
    ) -> list[Change]:
        """Part F's statements: one per unavailable node, in the order of ``nodes``."""


class HousekeepingReport(ABC):
    """Housekeeping reports on the queue and never changes it: the stuck rows (by the
    profile's ``stuck``) and the growth of its dead letters, in the profile's words."""

    @abstractmethod
    def stuck_note(self, total: int, ids: str, minutes: int) -> str:
        """The report's line of ``total`` stuck rows (``ids``: the first of them)."""

    @abstractmethod
    def quiet_note(self, minutes: int) -> str:
        """The report's line when nothing is stuck."""

    closing: str  # the report's last line
    described: str  # what ``queuebot config check`` says of housekeeping here
