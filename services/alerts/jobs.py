"""The alerts' work in the background: posting an alert group's thread and its updates
(the outbox's ``alert.post``, by ``AlertPublisher.deliver``). Counting the queues, which
the detectors judge, is upkeep (services/housekeeping/jobs.py)."""

from __future__ import annotations

from services.alerts.publish import AlertPublisher
from services.alerts.store import ALERT_POST
from services.outbox import Outbox


def register(outbox: Outbox, *, publisher: AlertPublisher) -> None:
    outbox.register(ALERT_POST, publisher.deliver)
