"""`/queue show` prints a job's JSON columns as JSON (`{"i": 4857}`, `false`), never as
Python (`{'i': 4857}`, `False`), in the console, Slack and Discord alike; and the dead
letter listing labels each system's attempts column for what it counts (pg-boss's
retry_count is the retries after the first attempt, Que's error_count the errors)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from bot.boundary import answer
from bot.discord.render import render as discord_render
from bot.render_text import render_message
from bot.slack.render import blocks as slack_blocks
from commands.context import Invocation
from commands.reply import Reply
from commands.router import Router
from services.message import Message
from tests.helpers.people import ALICE_APPROVER
from tests.integration.preset_adapters import PgBossAdapter, QueAdapter, RiverAdapter
from tests.integration.test_presets import ERROR, World, open_world
from tests.integration.test_retired_flags import router_over

pytestmark = pytest.mark.postgres


async def reply(router: Router, line: str) -> Message:
    inv = Invocation(person=ALICE_APPROVER, platform="console", account="alice", channel="ops")
    said = await answer(router.handle_line(line, inv), correlation_id="t", where="t")
    assert isinstance(said, Reply) and not said.error, render_message(said.message)
    return said.message


def slack_text(message: Message) -> str:
    def texts(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [
                t
                for k, v in node.items()
                for t in ([v] if k == "text" and isinstance(v, str) else texts(v))
            ]
        if isinstance(node, list):
            return [t for v in node for t in texts(v)]
        return []

    return "\n".join(texts(slack_blocks(message)))


@pytest.fixture
async def pg_boss(pg_url: str) -> AsyncIterator[World]:
    async for w in open_world(pg_url, PgBossAdapter):
        yield w


async def test_show_prints_json_columns_as_json_everywhere(pg_boss: World) -> None:
    job = pg_boss.built.dead[0]
    async with pg_boss.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE pgboss.job SET data = CAST(:d AS jsonb) WHERE id = CAST(:id AS uuid)"),
            {"d": json.dumps({"i": 4857, "resize": False, "sizes": [1, 2]}), "id": job},
        )
    router = router_over(pg_boss.estate, pg_boss.services.changes, pg_boss.services.plans)
    shown = await reply(router, f"/queue show {job} --queue q")
    data = '{"i": 4857, "sizes": [1, 2], "resize": false}'  # as jsonb keeps it
    output = json.dumps({"message": ERROR})
    for where, text in (
        ("console", render_message(shown)),
        ("slack", slack_text(shown)),
        ("discord", discord_render(shown).content),
    ):
        assert data in text, f"{where}:\n{text}"
        assert output in text, f"{where}:\n{text}"
        assert "{'" not in text and "False" not in text, f"{where}:\n{text}"
    rows = dict(line.split(maxsplit=1) for line in render_message(shown).splitlines()[3:] if line)
    assert rows["retry_backoff"].strip() == "false", rows


@pytest.mark.parametrize(
    ("kind", "label"), [(PgBossAdapter, "retries"), (QueAdapter, "errors"), (RiverAdapter, "tries")]
)
async def test_the_listing_labels_each_systems_attempts_truthfully(
    pg_url: str, kind: type[Any], label: str
) -> None:
    async for world in open_world(pg_url, kind):
        router = router_over(world.estate, world.services.changes, world.services.plans)
        listing = await reply(router, "/queue dlq --queue q")
        header = render_message(listing).splitlines()[1].split()
        assert label in header, header
        assert {"tries", "retries", "errors"} & set(header) == {label}, header
