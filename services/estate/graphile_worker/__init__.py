"""The graphile-worker preset (Node): its ``jobs`` view, changed only by its functions."""

from __future__ import annotations

from services.estate.graphile_worker.preset import GraphileWorkerProfile

__all__ = ["GraphileWorkerProfile"]
