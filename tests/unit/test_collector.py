"""The cyclic collector pauses while a change is under way and comes back after the last
one, also when a change fails; a collector someone else turned off stays off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from services.changes import collector
from services.changes.collector import collector_paused


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_while_changes_overlap_and_back_after_the_last() -> None:
    gc.enable()
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)  # changes need not end in the order they began
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_back_after_a_change_that_failed() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the database went away")
    assert gc.isenabled()


def test_a_collector_turned_off_elsewhere_stays_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


async def test_a_pause_gone_on_too_long_ends_by_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change waiting on a lock, or changes overlapping one after another, never keep
    the collector off for longer than the cap."""
    gc.enable()
    monkeypatch.setattr(collector, "LONGEST", 0.05)
    with collector_paused():
        assert not gc.isenabled()
        await asyncio.sleep(0.15)
        assert gc.isenabled()
        with collector_paused():  # joins the pause that is over: the collector stays on
            assert gc.isenabled()
    assert gc.isenabled()
