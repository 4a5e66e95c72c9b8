"""What housekeeping does on a message_job queue: it reports on the messages a worker
holds past the visibility timeout and on the growth of the dead letters, and never
changes a message queue (its workers reclaim what they hold)."""

from __future__ import annotations

from services.estate.housekeeping import HousekeepingReport


class MessageJobReport(HousekeepingReport):
    closing = "message queues are reported on, never changed"
    described = (
        "housekeeping: reports PROCESSING messages past the visibility timeout and "
        "dead-letter growth; never changes a message queue"
    )

    def stuck_note(self, total: int, ids: str, minutes: int) -> str:
        return (
            f"{total} PROCESSING message(s) held longer than the visibility timeout "
            f"({minutes} min, the queue's stuck_after_minutes); the workers reclaim "
            f"them: {ids}"
        )

    def quiet_note(self, minutes: int) -> str:
        return f"no PROCESSING message held longer than {minutes} min"
