"""What a profile gives ``queuebot demo``: a deterministic estate of its own tables, and
the simulated worker's pass over them (``ProfileDemo``). Each profile keeps its demo in
its package (``<profile>/demo.py``); ``QueueProfile.demo`` hands it out, None where the
profile has none."""

from __future__ import annotations

import random
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.tables import BoundTable

# Whether a row of a queue has been in a state long enough: (queue, row, state).
Due = Callable[[str, str, str], bool]


@dataclass
class Pass:
    """What one pass of the demo worker did."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def idle(self) -> bool:
        return not (self.claimed or self.succeeded or self.failed)


class Ids:
    """Reproducible ids: the same seed gives the same UUIDs."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)  # noqa: S311 - reproducible demo ids, not secrets

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._rng.randbytes(16), version=4)


async def insert(conn: AsyncConnection, table: BoundTable, rows: list[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(table.table.insert(), rows)


class ProfileDemo(ABC):
    """One profile's part of the demo, for one queue of it (the profile it was made by).
    Its estate's composition is fixed (``counts``), so the numbers a person sees in the
    demo and the numbers the tests assert are known."""

    counts: ClassVar[Mapping[str, Any]]
    # The demo's standing faults, by the name `/demo fix NAME` takes: what is broken, in
    # words. While one is not fixed, the jobs it breaks die again when redriven.
    faults: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    async def fill(self, conn: AsyncConnection, now: datetime) -> str:
        """Fill the profile's (empty, just created) tables; the id of the job the demo's
        story starts from. Timestamps are relative to ``now``."""

    @abstractmethod
    async def work(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        due: Due,
        done: Pass,
        fixed: frozenset[str] = frozenset(),
    ) -> None:
        """One pass of the simulated worker over the queue's rows queuebot put back,
        counted in ``done``; a row moves on once ``due`` says it waited long enough. The
        faults named in ``fixed`` no longer break the jobs they broke."""
