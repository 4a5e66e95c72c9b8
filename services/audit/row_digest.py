"""The digest of a change request's kept rows: the SHA-256 of the concatenated SHA-256
of each row image's UTF-8 text, in item order. PostgreSQL computes it where it writes the
images itself (``sql_row_hash``, ``sql_digest``), queuebot where it writes them
(``digest_of``), and ``audit verify`` recomputes it from the stored text (``recompute``):
the audit events carry digests, and the rows stay in ``qb_change_items`` and
``qb_change_outcomes``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import ChangeItem, ChangeOutcome

ITEMS = cast(sa.Table, ChangeItem.__table__)
OUTCOMES = cast(sa.Table, ChangeOutcome.__table__)
EMPTY = hashlib.sha256(b"").hexdigest()  # the digest of no images
_READ_BATCH = 5000


@dataclass(frozen=True)
class Digest:
    """How many images, and their digest; for a request's frozen items also the digest of
    what each names (``keys``: its job, its part and the state execution holds it to),
    the same way over ``key_text``, so that an item cannot be pointed at another row."""

    rows: int
    sha256: str
    keys: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": self.rows, "sha256": self.sha256}
        if self.keys is not None:
            out["keys_sha256"] = self.keys
        return out


def image_sha256(image: str) -> str:
    return hashlib.sha256(image.encode("utf-8")).hexdigest()


_UNIT = "\x1f"  # between the fields of an item's key text: in no id or status


def key_text(job_id: str, part: str | None, state: str) -> str:
    return f"{job_id}{_UNIT}{part or ''}{_UNIT}{state}"


class Running:
    def __init__(self) -> None:
        self._outer = hashlib.sha256()
        self._keys = hashlib.sha256()
        self.rows = 0

    def add(self, image: str) -> str:
        """Count one image in; its own SHA-256, hex."""
        row = hashlib.sha256(image.encode("utf-8"))
        self._outer.update(row.digest())
        self.rows += 1
        return row.hexdigest()

    def add_hash(self, sha256: str) -> None:
        """Count in one image by its SHA-256 (hex), as ``add`` would have computed it."""
        self._outer.update(bytes.fromhex(sha256))
        self.rows += 1

    def add_keys(self, job_id: str, part: str | None, state: str) -> None:
        self._keys.update(hashlib.sha256(key_text(job_id, part, state).encode("utf-8")).digest())

    def done(self, *, keys: bool = False) -> Digest:
        return Digest(self.rows, self._outer.hexdigest(), self._keys.hexdigest() if keys else None)


def digest_of(images: Iterable[str]) -> Digest:
    """The digest of image texts, in the order given."""
    running = Running()
    for image in images:
        running.add(image)
    return running.done()


def sql_row_hash(image: str) -> str:
    """PostgreSQL: the SHA-256 of one image's UTF-8 text (``image`` is fixed SQL)."""
    return f"sha256(convert_to({image}, 'UTF8'))"


def sql_key_hash(job_id: str, part: str, state: str) -> str:
    """PostgreSQL: the SHA-256 of an item's ``key_text`` (the arguments are fixed SQL)."""
    return (
        f"sha256(convert_to({job_id} || chr(31) || coalesce({part}, '') || chr(31) || "
        f"{state}, 'UTF8'))"
    )


def sql_digest(hashes: str, order: str) -> str:
    """The same digest as ``digest_of``, as a PostgreSQL aggregate over per-image hashes
    (``sql_row_hash``) ordered by ``order``; both are fixed SQL, never input."""
    return (
        f"encode(sha256(coalesce(string_agg({hashes}, ''::bytea ORDER BY {order}), "
        "''::bytea)), 'hex')"
    )


async def in_item_order(
    conn: AsyncConnection, query: sa.Select[Any], request: int
) -> AsyncIterator[Sequence[sa.Row[Any]]]:
    """The rows of ``query`` (over ``qb_change_items``, the item's ``seq`` first) for one
    request, in item order, a batch at a time: a large request is never read at once."""
    after = -1
    while True:
        rows = (
            await conn.execute(
                query.where(ITEMS.c.request_id == request, ITEMS.c.seq > after)
                .order_by(ITEMS.c.seq)
                .limit(_READ_BATCH)
            )
        ).all()
        if rows:
            yield rows
        if len(rows) < _READ_BATCH:
            return
        after = rows[-1][0]


async def recompute(conn: AsyncConnection, request: int) -> tuple[Digest, Digest]:
    """The digests of a request's frozen images and of the images its changed rows had
    just before the change, from the stored text (``audit verify``): on PostgreSQL by
    the database in one statement, elsewhere read in batches and hashed here."""
    if conn.dialect.name == "postgresql":
        return await _recompute_in_database(conn, request)
    frozen, before = Running(), Running()
    joined = ITEMS.outerjoin(
        OUTCOMES,
        sa.and_(OUTCOMES.c.request_id == ITEMS.c.request_id, OUTCOMES.c.seq == ITEMS.c.seq),
    )
    query = sa.select(
        ITEMS.c.seq,
        ITEMS.c.image,
        OUTCOMES.c.seq,
        OUTCOMES.c.before,
        ITEMS.c.job_id,
        ITEMS.c.part,
        ITEMS.c.state,
    ).select_from(joined)
    async for rows in in_item_order(conn, query, request):
        for _, image, changed, was, job_id, part, state in rows:
            frozen.add(image)
            frozen.add_keys(job_id, part, state)
            if changed is not None:
                before.add(image if was is None else was)
    stray = (
        await conn.execute(
            sa.select(sa.func.count())
            .select_from(OUTCOMES)
            .where(
                OUTCOMES.c.request_id == request,
                ~sa.exists().where(
                    ITEMS.c.request_id == OUTCOMES.c.request_id, ITEMS.c.seq == OUTCOMES.c.seq
                ),
            )
        )
    ).scalar_one()
    if stray:  # outcomes without an item: counted, so that the digest cannot match
        return frozen.done(keys=True), Digest(before.rows + int(stray), before.done().sha256)
    return frozen.done(keys=True), before.done()


async def _recompute_in_database(conn: AsyncConnection, request: int) -> tuple[Digest, Digest]:
    """``recompute`` as one PostgreSQL statement: the same digests, over the same UTF-8
    text, without carrying every image to queuebot. An outcome without an item is counted
    among the before-images, so that their digest cannot match."""
    image_hash = sql_row_hash("i.image")
    key_hash = sql_key_hash("i.job_id", "i.part", "i.state")
    before_hash = sql_row_hash("coalesce(o.before, i.image)")
    # every fragment is fixed SQL from this module; the request is a bound parameter
    sql = f"""
SELECT count(*),
       {sql_digest(image_hash, "i.seq")},
       {sql_digest(key_hash, "i.seq")},
       count(o.seq),
       encode(sha256(coalesce(string_agg({before_hash}, ''::bytea ORDER BY i.seq)
                              FILTER (WHERE o.seq IS NOT NULL), ''::bytea)), 'hex'),
       (SELECT count(*) FROM qb_change_outcomes AS s
        WHERE s.request_id = :request
          AND NOT EXISTS (SELECT 1 FROM qb_change_items AS t
                          WHERE t.request_id = s.request_id AND t.seq = s.seq))
FROM qb_change_items AS i
LEFT JOIN qb_change_outcomes AS o ON o.request_id = i.request_id AND o.seq = i.seq
WHERE i.request_id = :request"""
    rows, sha, keys, changed, before_sha, stray = (
        await conn.execute(sa.text(sql), {"request": request})
    ).one()
    return Digest(int(rows), str(sha), str(keys)), Digest(
        int(changed) + int(stray), str(before_sha)
    )


async def kept_digest(conn: AsyncConnection, request: int) -> Digest:
    """The digest of a request's items as they were just written (their stored
    ``image_sha256``, in item order, and their keys): a request kept a page at a time is
    digested once its last page is in. Read a batch at a time and hashed here, so no
    statement grows with the request (a million rows in one aggregate took seconds, a
    busy database's statement timeout)."""
    running = Running()
    query = sa.select(
        ITEMS.c.seq, ITEMS.c.image_sha256, ITEMS.c.job_id, ITEMS.c.part, ITEMS.c.state
    )
    async for rows in in_item_order(conn, query, request):
        for _, sha, job_id, part, state in rows:
            running.add_hash(str(sha))
            running.add_keys(job_id, part, state)
    return running.done(keys=True)
