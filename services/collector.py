"""Python's cyclic garbage collector, paused while one change request is built or run.

A change over many rows builds hundreds of thousands of short-lived records and dicts:
the frozen targets, their images, the audit event's details. Reference counting frees
them; the cyclic collector only walks them, again and again as they pile up (a fifth to a
quarter of a 100,000-job request and approval, and the reason its time grew faster than
its rows). So the collector pauses from the start of a request or an approval until its
transaction ends, and resumes once no change is under way. Cycles made meanwhile wait
for the next pass, a few seconds at most.

The pause is process-wide, like the collector itself: the webhook's requests served
meanwhile are not collected either, which only shortens their pauses. Changes under way
at once share one pause (a count), and a collector that was already off stays off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


class _Pause:
    """Changes under way that paused the collector, and whether it ran before them."""

    holding = 0
    was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    if _Pause.holding == 0:
        _Pause.was_enabled = gc.isenabled()
        gc.disable()
    _Pause.holding += 1
    try:
        yield
    finally:
        _Pause.holding -= 1
        if _Pause.holding == 0 and _Pause.was_enabled:
            gc.enable()
