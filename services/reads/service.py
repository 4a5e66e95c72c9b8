"""Read-only queue operations: triage, show, dead letters, stuck rows, duplicates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from services.db import error_line
from services.errors import QueuebotError
from services.estate.args_like import ArgsFound
from services.estate.estate import Estate
from services.estate.model import (
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobList,
    JobSummary,
    Triage,
)
from services.estate.ops import chunk_for, chunks
from services.reads.gate import ReadGate

MAX_LIST = 200


@dataclass(frozen=True)
class DeadCounts:
    """Each queue's dead letters now, and why any queue could not be counted."""

    counts: Mapping[str, int]
    unread: Mapping[str, str]


class QueueReads:
    """Each read opens one connection to the estate and closes it; identical reads in
    the same few seconds are answered once (see ``ReadGate``)."""

    def __init__(self, estate: Estate, *, gate: ReadGate) -> None:
        self.estate = estate
        self.gate = gate

    @property
    def queue_names(self) -> list[str]:
        return list(self.estate.profiles)

    def forget_recent(self) -> None:
        """After a change: the next reads show it, not a result kept from before."""
        self.gate.forget()

    async def triage(
        self,
        *,
        queue: str | None = None,
        since: timedelta | None = None,
        job_type: str | None = None,
        exact: bool = False,
    ) -> Triage:
        profile = self.estate.profile(queue)

        async def load() -> Triage:
            now = self.estate.clock()
            async with self.estate.connect() as conn:
                return await profile.triage(
                    conn,
                    now=now,
                    since=now - since if since else None,
                    job_type=job_type,
                    exact=exact,
                )

        return await self.gate.read(("triage", profile.queue, since, job_type, exact), load)

    async def show_job(self, *, queue: str | None = None, job_id: str) -> JobDetail:
        profile = self.estate.profile(queue)

        async def load() -> JobDetail:
            async with self.estate.connect() as conn:
                return await profile.show(conn, job_id=job_id)

        return await self.gate.read(("show", profile.queue, job_id), load)

    async def find_by_args(self, *, queue: str | None = None, text: str) -> ArgsFound:
        """The jobs whose arguments hold ``text`` (a capped scan of the queue's table)."""
        profile = self.estate.profile(queue)

        async def load() -> ArgsFound:
            async with self.estate.connect() as conn:
                return await profile.find_by_args(conn, text=text)

        return await self.gate.read(("args", profile.queue, text), load)

    async def list_dead(self, *, queue: str | None = None, filters: DeadFilter) -> JobList:
        profile = self.estate.profile(queue)

        async def load() -> JobList:
            async with self.estate.connect() as conn:
                ids = filters.job_ids
                size = chunk_for(conn.dialect.name)
                if ids is None or len(ids) <= size:
                    found = await profile.dead(conn, filters=filters)
                    return replace(found, attempts_label=profile.attempts_label)
                # more jobs than one statement takes: each share listed, the newest kept
                shares = [
                    await profile.dead(conn, filters=replace(filters, job_ids=tuple(part)))
                    for part in chunks(ids, size)
                ]
            rows = sorted((r for f in shares for r in f.rows), key=_newest_first)
            total = sum(f.total for f in shares)
            return JobList(total, rows[: filters.limit], attempts_label=profile.attempts_label)

        return await self.gate.read(("dead", profile.queue, filters), load)

    async def list_stuck(self, *, queue: str | None = None, limit: int = 50) -> JobList:
        profile = self.estate.profile(queue)

        async def load() -> JobList:
            async with self.estate.connect() as conn:
                found = await profile.stuck(
                    conn, now=self.estate.clock(), limit=min(limit, MAX_LIST)
                )
            return replace(found, attempts_label=profile.attempts_label)

        return await self.gate.read(("stuck", profile.queue, limit), load)

    async def dead_letters(self, queues: Sequence[str]) -> DeadCounts:
        """How many dead letters each of ``queues`` holds now: each queue's own count
        (which the status index answers from the dead rows alone, what the periodic
        sample writes down as ``dead``), all in one statement. A queue that cannot be
        read is said to be, with why, and the others are still counted."""
        profiles = [self.estate.profile(q) for q in queues]

        async def load() -> DeadCounts:
            counts: dict[str, int] = {}
            unread: dict[str, str] = {}
            async with self.estate.connect() as conn:
                queries: dict[str, sa.Select[tuple[int]]] = {}
                for profile in profiles:
                    try:
                        queries[profile.queue] = await profile.dead_rows_query(conn)
                    except (QueuebotError, SQLAlchemyError) as exc:  # its tables, reflected
                        unread[profile.queue] = _why(exc)
                if not queries:
                    return DeadCounts(counts, unread)
                together = sa.select(
                    *(q.scalar_subquery().label(f"q{i}") for i, q in enumerate(queries.values()))
                )
                try:
                    row = (await conn.execute(together)).one()
                    counts.update(zip(queries, map(int, row), strict=True))
                except SQLAlchemyError:
                    await conn.rollback()  # each on its own, to say which cannot be read
                    for queue, query in queries.items():
                        try:
                            counts[queue] = int((await conn.execute(query)).scalar_one())
                        except SQLAlchemyError as exc:
                            await conn.rollback()
                            unread[queue] = _why(exc)
            return DeadCounts(counts, unread)

        return await self.gate.read(("dead letters", tuple(p.queue for p in profiles)), load)

    async def list_duplicates(
        self, *, queue: str | None = None, limit: int = 50
    ) -> list[DuplicateGroup]:
        profile = self.estate.profile(queue)
        async with self.estate.connect() as conn:
            return await profile.duplicates(conn, limit=min(limit, MAX_LIST))


def _why(exc: Exception) -> str:
    """Why a queue could not be read, in the database's or queuebot's words."""
    if isinstance(exc, DBAPIError):
        return error_line(exc)
    return str(exc) or type(exc).__name__


def _newest_first(row: JobSummary) -> tuple[bool, float]:
    """A listing's order across statements: newest first, rows without a time last."""
    at = row.at or datetime.min.replace(tzinfo=UTC)
    return (row.at is None, -at.timestamp())
