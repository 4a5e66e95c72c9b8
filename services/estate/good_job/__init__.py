"""The GoodJob preset (Ruby): ``good_jobs``, with no state column."""

from __future__ import annotations

from services.estate.good_job.preset import GoodJobProfile

__all__ = ["GoodJobProfile"]
