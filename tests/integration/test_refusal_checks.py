"""A refusal by a change's preconditions prints its checks as the preview does: one table
of precondition, verdict and detail, not a paragraph."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.render_text import render_message
from commands.messages import error_reply
from commands.messages.changes import change_message
from services.errors import PreconditionFailed
from services.estate.ops import Selector
from services.reads import samples
from tests.helpers.people import ALICE
from tests.integration.support import Shop, add_dead_letters
from tests.kinds import ChangeKind


async def request_plan(shop: Shop, error_like: str) -> object:
    return await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(error_like=error_like),
        reason="eviction fixed by raising memory limits",
        actor=ALICE,
    )


def checks_section(text: str) -> list[str]:
    """The lines of the rendered "Preconditions" table: its title, header and rows."""
    lines = text.splitlines()
    start = lines.index("-- Preconditions")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("--")), None)
    return [line for line in lines[start:end] if line.strip()][:8]


async def test_a_refusal_prints_its_checks_as_the_preview_table(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=3, error="pod evicted: memory limit exceeded")
    async with shop.engine.begin() as conn:  # a flat dead-letter count 15 minutes ago
        await samples.record(
            conn, profile=shop.estate.profile("clips"), now=shop.clock.now - timedelta(minutes=15)
        )
    preview = render_message(change_message(await request_plan(shop, "pod evicted")))  # type: ignore[arg-type]
    with pytest.raises(PreconditionFailed) as refused:
        await request_plan(shop, "NoSuchKey")  # every source object is gone
    reply = error_reply(refused.value)
    text = render_message(reply.message)

    assert text.startswith("== Refused by a safety check ==")
    assert "All checks:" not in text  # no paragraph of checks
    shown = checks_section(text)
    assert shown[1].split() == checks_section(preview)[1].split()  # the same columns
    assert shown[1].split() == ["precondition", "verdict", "detail"]
    rows = {line.split("  ")[0].strip(): line for line in shown[2:]}
    assert "FAILED" in rows["source object exists"]
    assert "8 job(s) without their source object excluded" in rows["source object exists"]
    assert reply.message.summary.startswith(
        "Refused by a safety check: plan refused: source object exists:"
    )
