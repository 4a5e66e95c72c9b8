"""Where the board is shown (``qb_board_views``), the board's one table: each Slack user
who opened queuebot's App Home and when they last did, a Discord channel's status message
and its id, and the digest of what each place last showed. Every function runs inside
its caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import BoardView
from services.estate.profile import as_utc

VIEWS = cast(sa.Table, BoardView.__table__)


@dataclass(frozen=True)
class Place:
    """One place the board is shown: a Slack user's App Home (``account``: their user id)
    or a Discord channel's status message (``account``: the channel; ``message_id``: the
    message, once posted)."""

    platform: str
    account: str
    seen_at: datetime
    digest: str | None = None  # of what it last showed (None: nothing yet)
    message_id: str | None = None


async def seen(conn: AsyncConnection, *, platform: str, account: str, at: datetime) -> None:
    """The person opened the board at ``at`` (a new place, or one seen again: what it
    last showed is kept, so an unchanged board is not published again)."""
    await _upsert(conn, {"platform": platform, "account": account, "seen_at": at}, ["seen_at"])


async def _upsert(conn: AsyncConnection, values: dict[str, Any], update: list[str]) -> None:
    """Add the place ``values`` names, or set ``update`` of those values where it is."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = insert(VIEWS).values(values)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[VIEWS.c.platform, VIEWS.c.account],
            set_={name: statement.excluded[name] for name in update},
        )
    )


async def places(
    conn: AsyncConnection,
    *,
    platform: str,
    since: datetime | None = None,
    account: str | None = None,
) -> list[Place]:
    """The places of ``platform`` seen since ``since`` (every one: None), or the one of
    ``account``."""
    query = sa.select(VIEWS).where(VIEWS.c.platform == platform)
    if since is not None:
        query = query.where(VIEWS.c.seen_at >= since)
    if account is not None:
        query = query.where(VIEWS.c.account == account)
    rows = (await conn.execute(query.order_by(VIEWS.c.account))).mappings().all()
    return [
        Place(
            platform=str(r["platform"]),
            account=str(r["account"]),
            seen_at=as_utc(r["seen_at"]) or r["seen_at"],
            digest=r["digest"],
            message_id=r["message_id"],
        )
        for r in rows
    ]


async def showed(
    conn: AsyncConnection, place: Place, *, digest: str, message_id: str | None, at: datetime
) -> None:
    """``place`` shows the board whose digest is ``digest`` since ``at`` (as the message
    ``message_id``, where the platform has one); a place not written down yet is added
    (when it was last opened is left as it is: it may have been opened again meanwhile)."""
    values = {
        "platform": place.platform,
        "account": place.account,
        "seen_at": place.seen_at,
        "digest": digest,
        "shown_at": at,
        "message_id": message_id,
    }
    await _upsert(conn, values, ["digest", "shown_at", "message_id"])


async def forget(conn: AsyncConnection, *, platform: str, keep: str | None) -> None:
    """Forget the places of ``platform`` but ``keep`` (a Discord status message in a
    channel no longer configured)."""
    query = VIEWS.delete().where(VIEWS.c.platform == platform)
    if keep is not None:
        query = query.where(VIEWS.c.account != keep)
    await conn.execute(query)
