"""A change request's frozen rows, kept in ``qb_change_items`` rather than carried
through queuebot: their keys, the state execution holds each to and each row's image
when frozen; and the rows its execution changed, in ``qb_change_outcomes``, with their
images from just before the change. The audit events carry digests of the images
(``services.audit.row_digest``). Here targets become items and items targets; the
statements on the two tables are ``services.audit.row_digest``'s.

Steps in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import row_digest
from services.audit.row_digest import Digest, Running, digest_of, image_sha256
from services.estate.ops import Target
from services.jsonable import canonical, loads

_WRITE_BATCH = 2000  # rows per executemany batch: a bounded list, whatever the size


def image_text(row: Any) -> str:
    """A row image as the canonical JSON text stored and digested."""
    return canonical(row)


async def write(
    conn: AsyncConnection, *, request: int, targets: Sequence[Target], first: int = 0
) -> Digest:
    """Keep the targets and their images (built by the profile) as the request's items,
    numbered from ``first``; the digest of these images and of their keys."""
    running = Running()
    batch: list[dict[str, Any]] = []
    for seq, t in enumerate(targets, start=first):
        image = image_text(t.row)
        sha = running.add(image)
        running.add_keys(t.id, t.part, t.state)
        batch.append(
            {
                "request_id": request,
                "seq": seq,
                "job_id": t.id,
                "part": t.part,
                "key": canonical(t.key),
                "state": t.state,
                "signature": t.signature,
                "image": image,
                "image_sha256": sha,
            }
        )
        if len(batch) >= _WRITE_BATCH:
            await row_digest.insert(conn, batch)
            batch = []
    if batch:
        await row_digest.insert(conn, batch)
    return running.done(keys=True)


async def count(conn: AsyncConnection, request: int) -> int:
    return await row_digest.count(conn, request)


async def targets(conn: AsyncConnection, request: int) -> list[Target]:
    """The request's items as targets (keys and states; their images stay here)."""
    out: list[Target] = []
    async for rows in row_digest.keys(conn, request):
        out.extend(
            Target(id=r[1], key=loads(r[3]), state=r[4], signature=r[5], row={}, part=r[2])
            for r in rows
        )
    return out


def item_ref(target: Target) -> str:
    """What names an item among its request's: its part where it has one, else its job."""
    return target.part if target.part is not None else target.id


async def save_before(
    conn: AsyncConnection,
    *,
    request: int,
    targets: Sequence[Target],
    before: Sequence[tuple[str, Any]],
) -> Digest:
    """Record the items changed, each with its image from just before the change
    (``before`` pairs an item's ``item_ref`` with its image), and return the digest of
    those images in item order."""
    seq_of = {item_ref(t): seq for seq, t in enumerate(targets)}
    texts = sorted(((seq_of[ref], image_text(image)) for ref, image in before), key=lambda x: x[0])
    frozen = await row_digest.image_hashes(conn, request)
    for start in range(0, len(texts), _WRITE_BATCH):
        await row_digest.insert_outcomes(
            conn,
            [  # NULL where the image is the frozen one, as the database's path keeps it
                {
                    "request_id": request,
                    "seq": seq,
                    "before": None if frozen.get(seq) == image_sha256(text) else text,
                }
                for seq, text in texts[start : start + _WRITE_BATCH]
            ],
        )
    return digest_of(text for _, text in texts)


async def skipped(conn: AsyncConnection, request: int) -> list[tuple[str, str]]:
    """The items the change left alone (job id, frozen state), one per job, where no row
    of the job was changed."""
    return await row_digest.left_alone(conn, request)
