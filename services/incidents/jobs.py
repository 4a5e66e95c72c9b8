"""The incidents' work in the background: reminders and deadlines (the scheduler's
``incident.remind`` and ``incident.deadline``, fired in batches by ``Timers.fire``)
and the delivery of an incident's posts (the outbox's ``incident.post``, one at a time,
each recorded as delivered by ``Incidents.delivered``); and the incidents' kind of change
request, resolving one without its validation (``approvable.py``)."""

from __future__ import annotations

from typing import Protocol

from services.changes.kinds import Kinds
from services.incidents.approvable import ResolveOverride
from services.incidents.publish import INCIDENT_POST, IncidentPublisher
from services.incidents.service import Incidents
from services.incidents.timers import DEADLINE, REMIND
from services.notify import Notifier
from services.outbox import Outbox
from services.scheduler import Scheduler, SharedDeps


class Deps(SharedDeps, Protocol):
    @property
    def incidents(self) -> Incidents: ...

    @property
    def notifier(self) -> Notifier | None: ...

    @property
    def kinds(self) -> Kinds: ...


def register(sched: Scheduler, outbox: Outbox, deps: Deps) -> None:
    """An incident's timers and posts, and its kind of change request. Timers are
    scheduled when an incident is declared (nothing to make sure of at start)."""
    incidents = deps.incidents
    deps.kinds.register(ResolveOverride(incidents.resolution))
    sched.register_batch((REMIND, DEADLINE), incidents.timers.fire)
    outbox.register(
        INCIDENT_POST,
        IncidentPublisher(
            engine=incidents.engine, notifier=deps.notifier, delivered=incidents.delivered
        ).post,
    )
