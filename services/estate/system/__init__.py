"""What every preset shares: a job-queue system's own table read and changed through a
profile (``SystemProfile``), the system's facts declared by each preset's package
(``services/estate/river/`` and its siblings)."""

from __future__ import annotations

from services.estate.system.base import Columns
from services.estate.system.profile import SystemProfile

__all__ = ["Columns", "SystemProfile"]
