"""Keep the garbage collector's full passes short in the long-running processes.

After start-up, serve holds a large heap that lives as long as the process: the imported
libraries (SQLAlchemy, Bolt, discord.py, Starlette), the wired services, the compiled
statements. CPython's full collection walks every tracked object each time enough
objects have been promoted to the oldest generation, which under a steady stream of
requests is about once a second. On that heap a full pass took 60 to 120 ms, with
nothing to collect, and every request in flight waited for it: it was the whole tail of
the webhook's latency (``python -m bench.alerts``).

``gc.freeze()`` moves what exists after start-up into a generation the collector never
walks again; objects made later are collected as before, and reference counting frees
almost everything anyway. What start-up made and later dropped in a cycle stays until the
process ends: a one-time cost, small against a pause per second.
"""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Collect once, then leave everything that survived start-up out of later passes."""
    gc.collect()
    gc.freeze()
