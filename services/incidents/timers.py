"""The reminders and deadlines of an incident's communications, in the durable scheduler:
scheduled when the incident is declared, unscheduled when a communication is met or the
incident resolved, and fired (``Timers.fire``, the scheduler's batch handler) in the
scheduler's transaction. They survive restarts and fire once across replicas.

A reminder tells the lead in the incident's thread, calling them by their mention; a
deadline that passes marks the communication missed on the timeline and in the audit
trail and escalates it to the declaration authority in the thread and the operators
channel, calling the lead and the authority's secondary (``authority``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services import outbox as relay
from services import scheduler
from services.audit import Actor, AuditTrail, NewEvent, incident_match
from services.audit.anchors import Anchors
from services.config.incidents import OPERATORS, IncidentsConfig
from services.incidents import messages, obligations, store, timeline
from services.incidents.authority import Authority, Held
from services.incidents.model import IncidentView, Note, ObligationView
from services.incidents.publish import INCIDENT_POST, anchor, post_item, wake_after
from services.outbox import Outbox
from services.runbooks import Runbook

REMIND = incident_match.REMIND  # the timers' kinds, which audit verify reads too
DEADLINE = incident_match.DEADLINE
SYSTEM = Actor.system("incident")


async def schedule(
    conn: AsyncConnection,
    obligation: int,
    within: timedelta,
    now: datetime,
    remind_at: Sequence[float],
) -> list[tuple[str, datetime]]:
    """A communication's reminders (at each fraction of ``within``) and its deadline;
    the reminders as (subject, due), as its declaration records them."""
    reminders = [
        (f"{obligation}:{round(fraction * 100)}", now + within * fraction) for fraction in remind_at
    ]
    for reminder, at in reminders:
        await scheduler.schedule(conn, kind=REMIND, subject=reminder, due_at=at, created_at=now)
    await scheduler.schedule(
        conn, kind=DEADLINE, subject=str(obligation), due_at=now + within, created_at=now
    )
    return reminders


async def cancel(
    conn: AsyncConnection, obligations: Iterable[int], remind_at: Sequence[float]
) -> None:
    """Unschedule the reminders and the deadline of each of ``obligations``."""
    for obligation in obligations:
        for fraction in remind_at:
            await scheduler.unschedule(
                conn, kind=REMIND, subject=f"{obligation}:{round(fraction * 100)}"
            )
        await scheduler.unschedule(conn, kind=DEADLINE, subject=str(obligation))


class Timers:
    def __init__(
        self,
        *,
        outbox: Outbox,
        audit: AuditTrail,
        config: IncidentsConfig,
        runbook: Callable[[str], Runbook],
        authority: Authority,
        anchors: Anchors | None,
    ) -> None:
        """The collaborators as ``Incidents`` has them (its constructor says what each
        is)."""
        self.outbox = outbox
        self.audit = audit
        self.config = config
        self.runbook = runbook
        self.authority = authority
        self.anchors = anchors

    async def fire(
        self, conn: AsyncConnection, items: Sequence[scheduler.Due], now: datetime
    ) -> None:
        """The reminders (``incident.remind``, subject ``OBLIGATION:PERCENT``) and the
        deadlines (``incident.deadline``, subject ``OBLIGATION``) that came due, in due
        order, as one batch: their obligations read and locked in one statement, their
        timeline entries and posts written a statement each, their audit events in one
        round trip (``AuditTrail.append_many``). An obligation met or missed since, or of an
        incident resolved since, says nothing; a reminder whose deadline passed says
        nothing either (the deadline's escalation says it)."""
        ids = [_obligation_of(item) for item in items]
        pending = await store.pending_obligations(conn, ids)
        reminded: dict[int, int] = {}
        missed: dict[int, None] = {}  # in due order
        notes: list[Note] = []
        posts: list[dict[str, Any]] = []
        events: list[NewEvent] = []
        held: dict[str, Held] = {}  # each runbook's authority, asked once a batch
        for item, obligation_id in zip(items, ids, strict=True):
            found = pending.get(obligation_id)
            if found is None or obligation_id in missed:
                continue  # met, missed already, or the incident is over: nothing to say
            view, obligation = found
            if item.kind == REMIND:
                if now >= obligation.due_at:
                    continue  # due already (queuebot was down past it): the escalation says it
                reminded[obligation_id] = reminded.get(obligation_id, 0) + 1
                self._remind(view, obligation, now, notes, posts)
            else:
                missed[obligation_id] = None
                runbook = self.runbook(view.scenario)
                if runbook.id not in held:
                    held[runbook.id] = await self.authority.held(runbook)
                self._escalate(view, obligation, now, (runbook, held[runbook.id]), notes, posts)
                events.append(self._missed(view, obligation, now, held[runbook.id]))
        await obligations.reminded(conn, reminded)
        await obligations.missed(conn, list(missed), now)
        await timeline.note_many(conn, notes)
        if posts:
            await relay.add_many(conn, kind=INCIDENT_POST, items=posts, now=now)
        await self.audit.append_many(conn, events)  # the chain stays locked till commit
        anchored = await anchor(self.anchors, conn, now) if events else False
        if posts or anchored:
            wake_after(conn, self.outbox)

    def _remind(
        self,
        view: IncidentView,
        obligation: ObligationView,
        now: datetime,
        notes: list[Note],
        posts: list[dict[str, Any]],
    ) -> None:
        """A reminder to the lead: its timeline entry and its post in the thread."""
        notes.append(
            Note(
                view.number,
                now,
                "reminder",
                f"reminded {view.lead or 'the lead'}: the {obligation.audience} are due by "
                f"{obligation.due_at:%H:%M:%S} UTC",
            )
        )
        draft = any(
            c.audience == obligation.audience and c.draft
            for c in self.runbook(view.scenario).communications
        )
        lead = self.authority.lead(view)
        posts.append(
            post_item(view.number, "thread", messages.reminder(view, obligation, now, draft, lead))
        )

    def _escalate(  # noqa: PLR0917 - the batch's lists, filled in due order
        self,
        view: IncidentView,
        obligation: ObligationView,
        now: datetime,
        authority: tuple[Runbook, Held],
        notes: list[Note],
        posts: list[dict[str, Any]],
    ) -> None:
        """A missed deadline: recorded as missed on the timeline, and escalated to the
        declaration authority in the thread and the operators channel, calling the lead
        and the authority's secondary."""
        runbook, held = authority
        notes.append(
            Note(
                view.number,
                now,
                "missed",
                f"the {obligation.audience} were not told within "
                f"{messages.duration(obligation.within)}: escalated to {runbook.declaration_role}",
            )
        )
        escalation = messages.escalation(
            view, obligation, runbook.declaration_role, held, self.authority.lead(view)
        )
        channels = self.config.channels_of(OPERATORS)
        posts.append(post_item(view.number, "thread", escalation))
        posts.append(post_item(view.number, "audience", escalation, channels=channels))

    @staticmethod
    def _missed(
        view: IncidentView, obligation: ObligationView, now: datetime, held: Held
    ) -> NewEvent:
        """The missed deadline's audit event: whom it was escalated to."""
        return NewEvent(
            action="incident.deadline_missed",
            actor=SYSTEM,
            at=now,
            subject=view.name,
            queue=view.queue,
            incident=view.name,
            details={
                "audience": obligation.audience,
                "due_at": obligation.due_at.isoformat(),
                "escalated_to": list(held.names),
                "lead": view.lead,
                "secondary": held.secondary.name if held.secondary else None,
            },
        )


def _obligation_of(item: scheduler.Due) -> int:
    """The obligation a timer is for: ``OBLIGATION`` or ``OBLIGATION:PERCENT``."""
    return int(item.subject.split(":", 1)[0])
