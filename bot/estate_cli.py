"""``queuebot estate indexes --print``: the indexes recommended for each configured queue's
tables, as SQL to review; where a table cannot be read, every index is listed and why."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.config import Config
from services.db import create_engine, normalise_url, sqlite_file
from services.errors import QueuebotError
from services.estate.estate import Estate
from services.estate.indexes import dead_jobs_index, recommended_indexes, unread_dead_index
from services.estate.system.dead_index import DeadIndex, statements
from services.estate.tables import BoundTable


@dataclass
class _Found:
    """What ``estate indexes`` read of the queue database: each queue's tables as reflected
    and, on a preset whose system ships no index finding its dead jobs, the one to
    recommend; where a queue's tables cannot be read, why."""

    tables: dict[str, dict[str, BoundTable]] = field(default_factory=dict)
    dead: dict[str, DeadIndex] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)


async def _estate_tables(estate: Estate, url: str) -> _Found:
    """One read-only connection for every queue, given 10 seconds in all: an unreachable
    database costs one wait, not one per queue."""
    path = sqlite_file(url)
    if path is not None and not path.exists():  # connecting would leave an empty file
        return _Found(why=dict.fromkeys(estate.profiles, f"there is no SQLite file {path}"))
    found = _Found()
    try:
        async with asyncio.timeout(10), estate.connect() as conn:
            for name, profile in estate.profiles.items():
                try:
                    found.tables[name] = await profile.tables(conn)
                    dead = await dead_jobs_index(conn, profile, found.tables[name])
                except QueuebotError as exc:
                    found.why[name] = exc.message
                    continue
                if dead is not None:
                    found.dead[name] = dead
    except TimeoutError:
        why = "the queue database gave no answer in 10 s"
        return _Found(why=dict.fromkeys(estate.profiles, why))
    except QueuebotError as exc:  # it cannot be reached or read
        return _Found(why=dict.fromkeys(estate.profiles, exc.message))
    return found


async def indexes(config: Config) -> int:
    dialect = (
        "postgresql"
        if normalise_url(config.env.estate_url).drivername.startswith("postgresql")
        else "sqlite"
    )
    out = [
        "-- queuebot: recommended indexes for your queue tables (optional, review first).",
        "-- PostgreSQL: run outside a transaction (CREATE INDEX CONCURRENTLY)."
        if dialect == "postgresql"
        else "-- SQLite.",
    ]
    engine = create_engine(config.env.estate_url, pool_size=1, settings=config.file.database)
    try:
        estate = Estate(engine=engine, queues=config.queues)
        read = await _estate_tables(estate, config.env.estate_url)
    finally:
        await engine.dispose()
    printed: dict[tuple[str, str], str] = {}  # (table, index) -> the queue it was printed for
    for name, profile in estate.profiles.items():
        out.append(f"\n-- queue {name} ({profile.name})")
        found = read.tables.get(name)
        if found is None:  # one line, whatever the reason says
            reason = " ".join(str(read.why.get(name)).split())
            out.append(f"-- its tables could not be read ({reason}): every index is listed")
        indexes = recommended_indexes(profile, dialect, tables=found)
        dead = read.dead.get(name)
        if dead is not None and (dead.table, dead.name) in printed:
            first = printed[(dead.table, dead.name)]
            indexes.append(
                f"-- {dead.name}: the same index as queue {first}'s, which serves every queue "
                f"of {dead.table}"
            )
        elif dead is not None:
            printed[(dead.table, dead.name)] = name
            indexes.extend(statements(dead))
        elif found is None:
            indexes.extend(unread_dead_index(profile))
        if not indexes and profile.preset:
            out.append(
                "-- none: a preset reads its system's own tables through the indexes the "
                "system ships for its workers"
            )
        out.extend(indexes)
    print("\n".join(out))
    return 0
