"""Python's cyclic garbage collector, paused while one change request is built or run.

A change over many rows builds hundreds of thousands of short-lived records and dicts:
the frozen targets, their images, the audit event's details. Reference counting frees
them; the cyclic collector only walks them, again and again as they pile up (a fifth to a
quarter of a 100,000-job request and approval, and the reason its time grew faster than
its rows). So the collector pauses from the start of a request or an approval until its
transaction ends, and resumes once no change is under way, or ``LONGEST`` seconds after
the pause began, whichever comes first: a change waiting on a lock, or changes
overlapping one after another, never keep it off for long. Cycles made meanwhile wait
for the next pass.

When the last change under way ends, the memory its rows took goes back to the operating
system (``malloc_trim``, where the C library is glibc): the allocator otherwise keeps the
freed pages, and a process that once changed 100,000 rows stayed 50 MB larger for good.

The pause is process-wide, like the collector itself: the webhook's requests served
meanwhile are not collected either, which only shortens their pauses. Changes under way
at once share one pause (a count), and a collector that was already off stays off.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

LONGEST = 30.0  # seconds a pause may last, however many changes keep it


def _find_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


_TRIM = _find_trim()


class _Pause:
    """Changes under way that paused the collector, whether it ran before them, and the
    timer that ends a pause gone on too long."""

    holding = 0
    was_enabled = False
    timer: asyncio.TimerHandle | None = None


def _resume() -> None:
    _Pause.timer = None
    if _Pause.was_enabled:
        gc.enable()
        _Pause.was_enabled = False  # this pause is over; the changes still under way end it


@contextmanager
def collector_paused() -> Iterator[None]:
    if _Pause.holding == 0:
        _Pause.was_enabled = gc.isenabled()
        gc.disable()
        try:
            _Pause.timer = asyncio.get_running_loop().call_later(LONGEST, _resume)
        except RuntimeError:  # no event loop: nothing else runs meanwhile anyway
            _Pause.timer = None
    _Pause.holding += 1
    try:
        yield
    finally:
        _Pause.holding -= 1
        if _Pause.holding == 0:
            if _Pause.timer is not None:
                _Pause.timer.cancel()
                _Pause.timer = None
            if _Pause.was_enabled:
                gc.enable()
            if _TRIM is not None:
                _TRIM(0)  # the pages the change's rows took, back to the system
