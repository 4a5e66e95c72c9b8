"""The ``[housekeeping]`` part of the TOML file: whether ``queuebot serve`` runs
housekeeping on its own schedule, how far back a report compares the dead letters, and,
in the same table, worker_queue's own thresholds (``WorkerQueueSettings``,
worker_queue.py, which declares and validates them; this model takes its keys over, so
the file keeps its shape). The optional webhook that hears of retry-exhausted rows is a
URL, and so a secret: it comes from the environment (``QUEUEBOT_HOUSEKEEP_WEBHOOK_URL``)."""

from __future__ import annotations

from pydantic import Field

from services.config.worker_queue import WorkerQueueSettings

PARTS = ("A", "B", "C", "D", "E", "F")


class HousekeepingConfig(WorkerQueueSettings):
    """Housekeeping's own keys: ``periodic``: run every ``every_minutes`` inside ``queuebot
    serve`` (the shipped systemd timer is the other way). ``dead_letter_window_minutes``:
    how far back the report on a queue that housekeeping does not change (message_job,
    the presets) compares the dead-letter count. Every other key is worker_queue's
    (``WorkerQueueSettings``)."""

    periodic: bool = False
    every_minutes: int = Field(default=10, ge=1, le=24 * 60)
    dead_letter_window_minutes: int = Field(default=60, ge=1, le=7 * 24 * 60)
