"""The message_job vocabulary the reads and the writes share: each status column's own
values and their states, and the values queuebot writes (the reads go by state)."""

from __future__ import annotations

from services.estate.model import CanonicalState

MESSAGE_STATES = {
    "PENDING": CanonicalState.PENDING,
    "PROCESSING": CanonicalState.IN_FLIGHT,
    "COMPLETED": CanonicalState.SUCCEEDED,
    "DLQ": CanonicalState.DEAD,
}
JOB_STATES = {
    "QUEUED": CanonicalState.PENDING,
    "RUNNING": CanonicalState.IN_FLIGHT,
    "SUCCEEDED": CanonicalState.SUCCEEDED,
    "FAILED": CanonicalState.FAILED,
    "CANCEL_REQUESTED": CanonicalState.IN_FLIGHT,
    "CANCELLED": CanonicalState.CANCELLED,
}
UNFINISHED = (CanonicalState.PENDING, CanonicalState.IN_FLIGHT)

PENDING = "PENDING"  # a redriven message, waiting for a worker again
QUEUED = "QUEUED"  # a redriven message's job
CANCELLED = "CANCELLED"  # a dead-lettered job cancelled on purpose
# What a rollback puts back where a plan item kept no status of its own (items stored
# before statuses were kept, when only DLQ messages of FAILED jobs were redriven).
DLQ = "DLQ"
FAILED = "FAILED"
