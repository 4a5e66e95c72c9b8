"""Writes made side by side, committed together: every item that arrives while the
previous write runs goes into the next one, and each caller waits for its own.

Under a burst (fifty answers going out at once) each write is one transaction for many
items instead of one each: one connection checkout, one BEGIN and one COMMIT, so fewer
turns of the event loop that acknowledgements wait behind. A lone item is written at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Batched(Generic[T]):
    """``add`` an item and wait until ``write`` committed the batch it went in. A failed
    write fails every caller of its batch with the same exception; the next batch is
    tried anew."""

    def __init__(self, write: Callable[[list[T]], Awaitable[None]]) -> None:
        self._write = write
        self._pending: list[tuple[T, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def add(self, item: T) -> None:
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, written))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._run())
        await written

    async def _run(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self._write([item for item, _ in batch])
            except BaseException as exc:
                for _, written in batch:
                    if not written.done():
                        written.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for _, written in batch:
                if not written.done():
                    written.set_result(None)
