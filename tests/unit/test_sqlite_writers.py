"""SQLite's writers within one process take turns: in the order they asked, except that a
write an acknowledgement waits for goes before the others waiting; one whose turn does not
come in time is refused as SQLite refuses it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db import create_engine, transaction, writers
from services.errors import DatabaseUnavailable


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


async def test_a_cancel_landing_while_a_transaction_closes_leaves_no_turn_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command given up on (its ack could not wait) may be cancelled at any await,
    also the one closing its connection: the next writer still gets its turn."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}")
    closing = asyncio.Event()
    slow_close = AsyncConnection.close

    async def close(self: AsyncConnection) -> None:
        closing.set()
        await asyncio.sleep(0.2)
        await slow_close(self)

    async def write() -> None:
        async with transaction(engine, subject="t"):
            pass

    try:
        with monkeypatch.context() as patched:
            patched.setattr(AsyncConnection, "close", close)
            cancelled = asyncio.create_task(write())
            await closing.wait()
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        async with asyncio.timeout(2):  # not the 10 s wait for a turn never given back
            await write()
    finally:
        await engine.dispose()


async def test_a_waiter_cancelled_as_it_is_handed_the_turn_passes_it_on(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}")
    try:
        end = await writers.take_turn(engine)
        handed = asyncio.create_task(writers.take_turn(engine))
        await asyncio.sleep(0.01)  # waiting for the turn
        end()  # handed over ...
        handed.cancel()  # ... and cancelled before it ran again
        with pytest.raises(asyncio.CancelledError):
            await handed
        async with asyncio.timeout(1):
            (await writers.take_turn(engine))()  # the turn was passed on, not lost
    finally:
        await engine.dispose()
