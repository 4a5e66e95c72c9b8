"""The Procrastinate preset (Python): ``procrastinate_jobs`` and its events."""

from __future__ import annotations

from services.estate.procrastinate.preset import ProcrastinateProfile

__all__ = ["ProcrastinateProfile"]
