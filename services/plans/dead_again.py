"""A plan's jobs that died again: the jobs it redrove whose rows are in a dead state now,
whatever became of them in between. ``/queue redrive --from-plan P-N`` stages a plan over
them and ``/queue dlq --from-plan P-N`` lists them.

Read-only steps in the caller's transaction (the plan's items are read on queuebot's
connection, the rows on the queue's; they are one and the same where changes are made).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncConnection

from services.errors import NotFound
from services.estate.ops import CHUNK, ItemRef, chunks_of_whole
from services.estate.profile import QueueProfile
from services.plans import store


async def items(conn: AsyncConnection, *, number: int, profile: QueueProfile) -> list[ItemRef]:
    """The items the plan redrove (``store.redriven_refs``), once it is known to exist and
    to be a plan of ``profile``'s queue; else why not, naming the queue it is of."""
    await _of_queue(conn, number, profile)
    return await store.redriven_refs(conn, number)


async def pages(
    conn: AsyncConnection, *, number: int, profile: QueueProfile, size: int
) -> AsyncIterator[list[ItemRef]]:
    """``items`` a page at a time (``store.redriven_ref_pages``): a plan of a million
    jobs is read without holding them all."""
    await _of_queue(conn, number, profile)
    async for page in store.redriven_ref_pages(conn, number, size):
        yield page


async def _of_queue(conn: AsyncConnection, number: int, profile: QueueProfile) -> None:
    queue = await store.queue_of(conn, number)  # NotFound for a plan that never was
    if queue != profile.queue:
        raise NotFound(
            f"P-{number} is a plan of queue {queue}, not of {profile.queue}: its jobs are "
            f"in {queue}. Write --queue {queue}, or leave --queue out"
        )


async def dead_of(
    conn: AsyncConnection, *, profile: QueueProfile, items: list[ItemRef]
) -> list[str]:
    """The jobs of ``items`` whose rows are dead now, in their order (a job with several
    rows the plan redrove counts once, when any of them is dead)."""
    dead: set[str] = set()
    for part in chunks_of_whole(items, CHUNK, key=lambda i: i.job_id):
        status = await profile.plan_ops.wave_status(conn, items=part)
        dead.update(job for job, _ in status.redead)
    return [job for job in dict.fromkeys(i.job_id for i in items) if job in dead]


async def jobs(conn: AsyncConnection, *, number: int, profile: QueueProfile) -> list[str]:
    """The plan's jobs dead again now, read on one connection."""
    redriven = await items(conn, number=number, profile=profile)
    return await dead_of(conn, profile=profile, items=redriven)
