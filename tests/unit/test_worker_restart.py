"""serve starts its background worker again when it dies; when no process can be made
for it (out of memory, a process limit), it keeps trying with the same growing pause, and
/readyz says so, instead of the worker staying down for good."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot import worker as worker_module
from bot.worker import Worker


async def test_a_worker_that_cannot_be_started_again_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tries: list[float] = []

    def cannot_start(self: Worker) -> None:
        tries.append(asyncio.get_running_loop().time())
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(Worker, "start", cannot_start)
    monkeypatch.setattr(worker_module, "RESTART_MOST", 0.2)
    config: Any = None
    app: Any = None
    handle = Worker(config, app)
    handle._pause = 0.05
    handle._start_again()  # as the timer after the worker ended calls it
    assert len(tries) == 1
    said = handle.describe()
    assert said.startswith("not running: starting again in 0 s; ended 1 time(s)"), said
    assert said.endswith("(could not be started)"), said
    # 0.05 s, then 0.1 s, then 0.2 s (the cap) between tries; a loaded host may be late
    for _ in range(100):
        if len(tries) >= 3:
            break
        await asyncio.sleep(0.05)
    assert len(tries) >= 3
    gaps = [tries[1] - tries[0], tries[2] - tries[1]]
    assert gaps[0] >= 0.049 and gaps[1] >= 0.099, gaps  # the pause grows
    await handle.stop()  # a stop cancels the next try
    count = len(tries)
    await asyncio.sleep(0.3)
    assert len(tries) == count
