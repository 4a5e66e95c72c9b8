"""The Solid Queue preset (Ruby): a job's state is which execution table holds it."""

from __future__ import annotations

from services.estate.solid_queue.preset import SolidQueueProfile

__all__ = ["SolidQueueProfile"]
