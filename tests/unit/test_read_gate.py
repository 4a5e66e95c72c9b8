"""The read gate: identical reads at once are read once; a few reads run at a time."""

from __future__ import annotations

import asyncio

from services.reads.gate import ReadGate


async def test_identical_reads_in_flight_are_answered_by_one_load() -> None:
    gate = ReadGate(concurrency=3, fresh_for=0)
    loads = 0
    release = asyncio.Event()

    async def load() -> str:
        nonlocal loads
        loads += 1
        await release.wait()
        return "triage"

    waiting = [asyncio.create_task(gate.read(("triage", "clips"), load)) for _ in range(20)]
    await asyncio.sleep(0.01)
    release.set()
    assert await asyncio.gather(*waiting) == ["triage"] * 20
    assert loads == 1


async def test_fresh_results_are_reused_then_reloaded() -> None:
    gate = ReadGate(fresh_for=0.05)
    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        return loads

    assert await gate.read("k", load) == 1
    assert await gate.read("k", load) == 1
    await asyncio.sleep(0.06)
    assert await gate.read("k", load) == 2


async def test_at_most_n_reads_run_at_once() -> None:
    gate = ReadGate(concurrency=2, fresh_for=0)
    running = peak = 0

    async def load() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    await asyncio.gather(*(gate.read(n, load) for n in range(10)))
    assert peak == 2


async def test_a_failed_read_fails_every_waiter_and_is_not_kept() -> None:
    gate = ReadGate(fresh_for=10)
    calls = 0

    async def load() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        if calls == 1:
            raise RuntimeError("database went away")
        return "ok"

    results = await asyncio.gather(
        *(gate.read("k", load) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await gate.read("k", load) == "ok"


async def test_a_caller_that_gives_up_leaves_the_read_to_the_others() -> None:
    gate = ReadGate(fresh_for=0)
    release = asyncio.Event()

    async def load() -> str:
        await release.wait()
        return "triage"

    first = asyncio.create_task(gate.read("k", load))
    second = asyncio.create_task(gate.read("k", load))
    await asyncio.sleep(0.01)
    first.cancel()  # the person who asked first went away (their answer task was cancelled)
    await asyncio.sleep(0.01)
    release.set()
    assert await second == "triage"
    assert first.cancelled()
