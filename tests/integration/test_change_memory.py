"""A large change leaves nothing large behind in the process once it is done.

A request keeps every row's image as its items, and its approval every row's image from
just before the change: megabytes for thousands of rows. SQLAlchemy caches a statement's
compiled form together with the statement it was first compiled from, so a value put into
a statement (``.values(details=...)``) rather than passed as a parameter stayed in memory
for the life of the process: a 100,000-job redrive's request event once kept 96 MB. The
audit events now carry digests of the images, and stay small whatever the change's size.
"""

from __future__ import annotations

import gc
from typing import Any

import sqlalchemy as sa

from services.changes.model import RequestState
from services.config import ApprovalConfig
from services.estate.ops import Selector
from tests.helpers.people import ALICE, BOB_ON_SLACK
from tests.integration.support import Shop
from tests.kinds import ChangeKind

ROWS = 2_000
LARGE = 512 * 1024  # a kept text this big is a change's data, not the process's own


def large_texts() -> list[int]:
    """The sizes of the str and bytes objects over LARGE that live containers hold."""
    gc.collect()
    found: dict[int, int] = {}
    for holder in gc.get_objects():
        if isinstance(holder, dict):
            values: Any = holder.values()
        elif isinstance(holder, list | tuple):
            values = holder
        else:
            continue
        for value in values:
            if isinstance(value, str | bytes) and len(value) > LARGE:
                found[id(value)] = len(value)
    return sorted(found.values())


async def add_failed_rows(shop: Shop) -> list[str]:
    error = "Traceback (most recent call last): " + "frame in worker/dispatch.py; " * 30
    rows = [
        {
            "issue": 900_000 + n,
            "type": "dev-issue",
            "error": f"{error} task {n}",
        }
        for n in range(ROWS)
    ]
    async with shop.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO dev_r_worker_queue (issue_number, job_type, status, "
                "failure_reason, error_message, retry_count, max_retries) "
                "VALUES (:issue, :type, 'failed', 'implementation_error', :error, 1, 3)"
            ),
            rows,
        )
        found = await conn.execute(
            sa.text("SELECT id FROM dev_r_worker_queue WHERE issue_number >= 900000 ORDER BY id")
        )
        return [str(r[0]) for r in found]


async def test_a_large_change_keeps_nothing_large_once_done(shop: Shop) -> None:
    ids = await add_failed_rows(shop)
    changes = shop.with_approval(ApprovalConfig(large_change_rows=ROWS + 1))
    before = large_texts()
    view = await changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=tuple(ids)),
        reason="allowlist fixed in PR #2081",
        actor=ALICE,
    )
    decision = await changes.approve(number=view.number, actor=BOB_ON_SLACK)
    assert decision.executed and decision.view.state is RequestState.EXECUTED
    assert decision.view.result is not None and len(decision.view.result.changed) == ROWS
    async with shop.engine.connect() as conn:
        kept = (
            await conn.execute(
                sa.text(
                    "SELECT sum(length(i.image)), sum(length(coalesce(o.before, i.image))) "
                    "FROM qb_change_items i JOIN qb_change_outcomes o "
                    "ON o.request_id = i.request_id AND o.seq = i.seq WHERE i.request_id = :n"
                ),
                {"n": view.number},
            )
        ).one()
        assert all(size > 4 * LARGE for size in kept)  # the rows really were large
        sizes = (
            await conn.execute(
                sa.text(
                    "SELECT length(details) FROM qb_audit_events "
                    "WHERE action IN ('change.requested', 'change.executed')"
                )
            )
        ).scalars()
        assert all(size < 64 * 1024 for size in sizes)  # digests, not the rows
    del view, decision
    assert large_texts() == before
