"""``queuebot estate indexes --print``: the indexes recommended for each configured queue's
tables, as SQL to review; where a table cannot be read, every index is listed and why."""

from __future__ import annotations

import asyncio

from services.config import Config
from services.db import create_engine, normalise_url, sqlite_file
from services.errors import QueuebotError
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.estate.tables import BoundTable


async def _estate_tables(
    estate: Estate, url: str
) -> tuple[dict[str, dict[str, BoundTable]], dict[str, str]]:
    """Each queue's tables as reflected, for ``estate indexes``; where they cannot be read,
    why. One read-only connection for every queue, given 10 seconds in all: an unreachable
    database costs one wait, not one per queue."""
    path = sqlite_file(url)
    if path is not None and not path.exists():  # connecting would leave an empty file
        return {}, dict.fromkeys(estate.profiles, f"there is no SQLite file {path}")
    tables: dict[str, dict[str, BoundTable]] = {}
    why: dict[str, str] = {}
    try:
        async with asyncio.timeout(10), estate.connect() as conn:
            for name, profile in estate.profiles.items():
                try:
                    tables[name] = await profile.tables(conn)
                except QueuebotError as exc:
                    why[name] = exc.message
    except TimeoutError:
        return {}, dict.fromkeys(estate.profiles, "the queue database gave no answer in 10 s")
    except QueuebotError as exc:  # it cannot be reached or read
        return {}, dict.fromkeys(estate.profiles, exc.message)
    return tables, why


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
        tables, why = await _estate_tables(estate, config.env.estate_url)
    finally:
        await engine.dispose()
    for name, profile in estate.profiles.items():
        out.append(f"\n-- queue {name} ({profile.name})")
        found = tables.get(name)
        if found is None:  # one line, whatever the reason says
            reason = " ".join(str(why.get(name)).split())
            out.append(f"-- its tables could not be read ({reason}): every index is listed")
        indexes = recommended_indexes(profile, dialect, tables=found)
        if not indexes and profile.preset:
            out.append(
                "-- none: a preset reads its system's own tables through the indexes the "
                "system ships for its workers"
            )
        out.extend(indexes)
    print("\n".join(out))
    return 0
