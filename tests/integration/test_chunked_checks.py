"""Checks over many jobs run in chunks (50,000 ids a statement on PostgreSQL): every chunk
after the first must ask the same question as the first. A 100,000-job plan once failed
on its second chunk of source-object checks."""

from __future__ import annotations

import pytest

from services.estate.message_job import plans as message_job_plans
from services.estate.model import DeadFilter
from services.estate.ops import Action, Selector
from tests.integration.support import Shop


async def test_source_checks_of_several_chunks_agree_with_one(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = shop.estate.profile("clips")
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=30))
    async with shop.engine.connect() as conn:
        frozen = await profile.changes.freeze(
            conn, action=Action.REDRIVE, selector=Selector(ids=tuple(r.id for r in dead.rows))
        )
        whole = await profile.plan_ops.source_missing(conn, targets=frozen.targets)
        monkeypatch.setattr(message_job_plans, "chunk_for", lambda _dialect: 3)
        chunked = await profile.plan_ops.source_missing(conn, targets=frozen.targets)
    assert len(frozen.targets) > 6
    assert chunked == whole
