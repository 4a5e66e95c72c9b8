"""The renderings of numbers, times and text replies use: ``services/format.py``, which
the services' own posts (an alert thread's triage) share."""

from __future__ import annotations

from services.format import age, approx, clip, count, count_of, share, value, when

__all__ = ["age", "approx", "clip", "count", "count_of", "share", "value", "when"]
