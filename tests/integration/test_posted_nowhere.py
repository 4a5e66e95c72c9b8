"""With no chat platform configured, a plan's news and an incident's posts go nowhere: the
outbox closes them as not posted (never retried), instead of recording them as delivered."""

from __future__ import annotations

import sqlalchemy as sa

from services.outbox import NOT_POSTED
from tests.helpers.people import BOB
from tests.integration.support import Shop, add_dead_letters, build_services
from tests.integration.test_plans import ERROR, flat_history, request_plan


async def test_plan_news_with_no_chat_platform_is_closed_as_not_posted(shop: Shop) -> None:
    services = build_services(shop.engine, shop.estate, shop.clock, None)  # no platform
    await add_dead_letters(shop.engine, count=20, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    await services.changes.approve(number=number, actor=BOB)
    assert await services.outbox.run_due() == []
    async with shop.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text("SELECT kind, done_at, last_error FROM qb_outbox WHERE kind LIKE 'plan%'")
            )
        ).all()
    assert rows, "the approval announced the plan"
    for kind, done_at, said in rows:
        assert done_at is not None, kind  # closed: nothing is retried
        assert said == NOT_POSTED, kind  # and the record says it went nowhere
