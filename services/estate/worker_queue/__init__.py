"""The worker_queue profile: its tables (``ddl/``), reads (``profile``), guarded writes
(``changes``) and staged-redrive operations (``plans``), in one package."""

from __future__ import annotations

from services.estate.worker_queue.profile import WorkerQueueProfile

__all__ = ["WorkerQueueProfile"]
