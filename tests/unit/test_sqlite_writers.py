"""SQLite's writers within one process take turns: in the order they asked, except that a
write an acknowledgement waits for goes before the others waiting; one whose turn does not
come in time is refused as SQLite refuses it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.db import DatabaseUnavailable, create_engine, transaction, writers


async def test_waiting_writers_go_in_turn_acknowledgements_first(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}")
    order: list[str] = []
    holding = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with transaction(engine, subject="t"):
            holding.set()
            await release.wait()

    async def writer(name: str, first: bool) -> None:
        async with transaction(engine, subject="t", first=first):
            order.append(name)

    try:
        held = asyncio.create_task(holder())
        await holding.wait()
        waiting = [
            asyncio.create_task(writer("answer 1", False)),
            asyncio.create_task(writer("answer 2", False)),
            asyncio.create_task(writer("ack", True)),
        ]
        await asyncio.sleep(0.05)
        assert order == []  # the holder still writes: everyone waits
        release.set()
        await asyncio.gather(held, *waiting)
        assert order == ["ack", "answer 1", "answer 2"]
    finally:
        await engine.dispose()


async def test_a_turn_that_never_comes_is_refused_as_sqlite_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writers, "WAIT", 0.1)
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}")
    try:
        async with transaction(engine, subject="t"):
            with pytest.raises(DatabaseUnavailable, match="database is locked"):
                async with transaction(engine, subject="CR-1"):
                    pass
        async with transaction(engine, subject="t"):  # the refused one left no turn held
            pass
    finally:
        await engine.dispose()
