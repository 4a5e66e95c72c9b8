"""The Oban preset (Elixir): ``oban_jobs``, its enum states and its ``errors`` history."""

from __future__ import annotations

from services.estate.oban.preset import ObanProfile

__all__ = ["ObanProfile"]
