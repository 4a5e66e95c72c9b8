"""The Que preset (Ruby): ``que_jobs``, with no state column."""

from __future__ import annotations

from services.estate.que.preset import QueProfile

__all__ = ["QueProfile"]
