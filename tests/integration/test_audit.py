"""The audit trail is append-only and any edit, deletion or reordering is detected."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from services import audit
from tests.integration.support import Shop, five_events


@pytest.fixture
async def trail(shop: Shop) -> Shop:
    """Five events: two requests, an approval, an execution, a rejection."""
    await five_events(shop)
    return shop


async def unlock(shop: Shop) -> None:
    """What an attacker with database rights would do first: remove the guard triggers."""
    async with shop.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(
                sa.text("ALTER TABLE qb_audit_events DISABLE TRIGGER qb_audit_events_append_only")
            )
        else:
            await conn.execute(sa.text("DROP TRIGGER qb_audit_events_no_update"))
            await conn.execute(sa.text("DROP TRIGGER qb_audit_events_no_delete"))


async def verify(shop: Shop) -> audit.Verification:
    async with shop.engine.connect() as conn:
        return await audit.AuditTrail().verify(conn)


async def test_intact_trail_verifies(trail: Shop) -> None:
    result = await verify(trail)
    assert result.ok and result.checked == 5


async def test_triggers_refuse_update_and_delete(trail: Shop) -> None:
    for statement in (
        "UPDATE qb_audit_events SET reason = 'x' WHERE id = 1",
        "DELETE FROM qb_audit_events WHERE id = 1",
    ):
        with pytest.raises(DBAPIError, match="append-only"):
            async with trail.engine.begin() as conn:
                await conn.execute(sa.text(statement))
    assert (await verify(trail)).ok


async def test_edited_event_is_named(trail: Shop) -> None:
    await unlock(trail)
    async with trail.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE qb_audit_events SET reason = 'nothing to see' WHERE id = 3")
        )
    result = await verify(trail)
    assert (result.first_bad, result.checked) == (3, 2)
    assert result.problem == "event 3 was edited after it was written"


async def test_deleted_event_is_named(trail: Shop) -> None:
    await unlock(trail)
    async with trail.engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM qb_audit_events WHERE id = 2"))
    result = await verify(trail)
    assert result.first_bad == 3
    assert "does not follow the event before it" in (result.problem or "")


async def test_deleting_the_newest_events_is_caught(trail: Shop) -> None:
    await unlock(trail)
    async with trail.engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM qb_audit_events WHERE id >= 4"))
    result = await verify(trail)
    assert result.first_bad == 5 and result.checked == 3
    assert "the latest events were deleted" in (result.problem or "")


async def test_reordered_events_are_caught(trail: Shop) -> None:
    await unlock(trail)
    async with trail.engine.begin() as conn:  # swap the positions of events 2 and 3
        for old, new in ((2, -2), (3, 2), (-2, 3)):
            await conn.execute(
                sa.text("UPDATE qb_audit_events SET id = :new WHERE id = :old"),
                {"old": old, "new": new},
            )
    result = await verify(trail)
    assert result.first_bad == 2
    assert "does not follow the event before it" in (result.problem or "")
