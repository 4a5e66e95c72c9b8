"""Discord end to end: the real `queuebot serve` process with DISCORD_BOT_TOKEN set, its
REST base and gateway pointed at a local fake Discord (testkit/fake_discord.py) that
speaks gateway v10 JSON and injects INTERACTION_CREATE as the gateway delivers it. The
tests read what the fake received: interaction callbacks, follow-ups, channel messages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from services.db import create_engine
from testkit.fake_discord import DEFAULT_TOKEN, FakeDiscord, Interaction
from tests.e2e.serving import Served, demo_database, running_serve

ALICE, BOB, STRANGER = "100000000000000001", "100000000000000002", "100000000000000099"
CHANNEL = "200000000000000001"
GUILD = "400000000000000001"
EXTRA = f'\n[discord]\nguild = "{GUILD}"\n'


@dataclass
class Stack:
    fake: FakeDiscord
    served: Served
    db_url: str
    workdir: Path

    def sql(self, statement: str, **params: Any) -> list[Any]:
        async def run() -> list[Any]:
            engine = create_engine(self.db_url)
            try:
                async with engine.connect() as conn:
                    return list((await conn.execute(sa.text(statement), params)).all())
            finally:
                await engine.dispose()

        return asyncio.run(run())


def _env(fake: FakeDiscord, token: str = DEFAULT_TOKEN) -> dict[str, str]:
    return {
        "DISCORD_BOT_TOKEN": token,
        "DISCORD_API_BASE_URL": fake.api_url,
        "QUEUEBOT_AUDIT_KEY": "e2e-audit-key-0123456789abcdef0123456789",
    }


@contextlib.contextmanager
def serving(fake: FakeDiscord, workdir: Path, db_url: str) -> Iterator[Served]:
    before = fake.identified
    with running_serve(workdir, db_url, _env(fake), extra=EXTRA) as served:
        fake.wait_until(lambda: fake.identified > before and fake.connected() > 0)
        wait_ready(served)
        yield served


def wait_ready(served: Served) -> None:
    for _ in range(300):
        body = httpx.get(f"{served.url}/readyz", timeout=5).json()
        if body.get("discord") == "ok":
            return
        import time

        time.sleep(0.05)
    raise AssertionError(f"Discord never became ready: {body}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("discord")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeDiscord().start() as fake,
        serving(fake, workdir, db_url) as served,
    ):
        yield Stack(fake, served, db_url, workdir)


def answered(fake: FakeDiscord, i: Interaction, *, timeout: float = 15.0) -> str:
    """Wait for the interaction's answer (the deferred response edited, or a follow-up)
    and return what the person reads."""

    def done() -> bool:
        return bool(i.followups) or (i.original is not None and i.original.edits > 0)

    try:
        fake.wait_until(done, timeout)
    except AssertionError:
        raise AssertionError(
            [(c.method, c.path, c.status, c.body) for c in fake.calls[-5:]]
        ) from None
    return "\n".join(m.text() for m in i.replies() if m.edits or m in i.followups)


def test_commands_are_synced_to_the_guild_with_typed_options(stack: Stack) -> None:
    registered = {c["name"]: c for c in stack.fake.commands[GUILD]}
    assert set(registered) == {"queue", "incident"}
    subs = {o["name"]: o for o in registered["queue"]["options"]}
    requeue = {o["name"]: o for o in subs["requeue"]["options"]}
    assert requeue["ids"]["type"] == 3 and requeue["ids"]["required"]
    assert requeue["reason"]["required"]
    dlq = {o["name"]: o for o in subs["dlq"]["options"]}
    assert dlq["limit"]["type"] == 4 and dlq["limit"]["max_value"] == 200
    assert "timeout" in [c["value"] for c in dlq["failure-reason"]["choices"]]
    incident = {o["name"]: o for o in registered["incident"]["options"]}
    notify = {o["name"]: o for o in incident["notify"]["options"]}
    assert "operators" in [c["value"] for c in notify["audience"]["choices"]]


def test_triage_is_deferred_at_once_then_answered(stack: Stack) -> None:
    i = stack.fake.command("queue", "triage", {"queue": "workers"}, user=ALICE)
    text = answered(stack.fake, i)
    assert i.callbacks[0]["type"] == 5  # deferred within the 3 s
    assert i.callbacks[0]["data"]["flags"] & 64  # a read is only for whoever asked
    took = i.answered_within()
    assert took is not None and took < 3.0
    assert "workers" in text and "failed" in text
