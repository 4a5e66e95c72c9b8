"""The River preset (Go): ``river_job``, its enum states and its ``errors`` history."""

from __future__ import annotations

from services.estate.river.preset import RiverProfile

__all__ = ["RiverProfile"]
