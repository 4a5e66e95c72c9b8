"""The incident tables against what the incident events say: a row the runtime role may
change for its normal work (an incident's state, a communication's state, a timer in the
schedule) must still say what the trail says happened.

- each incident: its ``incident.declared`` event, with the same summary, scenario, queue
  and lead (its declarer, the person and the account, until an ``incident.lead_changed``
  hands it over: then the last one's ``to``); resolved exactly when the trail has its
  ``incident.resolved``; and where the declaration records the restore step it holds
  redrives until (``blocks_redrives_until``, written since this check exists), holding
  them exactly until the trail has that step's ``incident.restore_done``;
- each communication (``qb_incident_obligations``): met when the trail's first word on
  its audience is an ``incident.notified`` in time, missed when it is a late one or an
  ``incident.deadline_missed``, pending while there is neither; and where the declaration
  records its communications (``obligations``, written since this check exists), the
  same communications, with the same row ids and deadlines;
- each communication still pending in an open incident: its deadline (the escalation)
  in ``qb_schedule``, due when the trail says (later only by a retry's backoff), and its
  reminders. A reminder leaves no audit event: one whose time is still to come must be
  there, and of those whose time has passed no more may be gone than the communication's
  count of reminders sent. After the deadline a reminder that came due late is dropped
  unsent (the escalation speaks instead), so reminders are judged only before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import Incident, IncidentObligation, ScheduledItem
from services.jsonable import loads
from services.scheduler import MAX_BACKOFF

REMIND = "incident.remind"  # the scheduler's kind of a reminder: subject OBLIGATION:PERCENT
DEADLINE = "incident.deadline"  # the scheduler's kind of a deadline: subject OBLIGATION
SKEW = timedelta(minutes=1)  # how far the scheduler's clock may run ahead of verify's

_incidents = cast(sa.Table, Incident.__table__)
_obligations = cast(sa.Table, IncidentObligation.__table__)
_schedule = cast(sa.Table, ScheduledItem.__table__)


def declared_obligation(
    obligation: int, audience: str, due_at: datetime, reminders: list[tuple[str, datetime]]
) -> dict[str, Any]:
    """A communication as ``incident.declared`` records it: its row's id, its audience,
    its deadline and its reminders (subject, due), which are the timers it schedules."""
    return {
        "id": obligation,
        "audience": audience,
        "due_at": due_at.isoformat(),
        "reminders": [[subject, due.isoformat()] for subject, due in reminders],
    }


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "...'"


@dataclass
class _Obligation:
    id: int
    audience: str
    state: str
    due_at: datetime
    reminders: int


@dataclass
class _Said:
    """What the trail says of one incident."""

    event: int
    summary: str | None
    scenario: object
    queue: str | None
    lead: str | None
    lead_platform: str | None
    lead_account: str | None
    recorded: list[dict[str, Any]] | None  # the declaration's communications, if recorded
    # whether the declaration records the restore step it holds redrives until, and which
    hold_recorded: bool = False
    holds_until: str | None = None
    restored: set[str] = field(default_factory=set)  # restore steps the trail says are done
    resolved: bool = False
    lead_event: str | None = None  # the last event that handed the lead over
    decided: dict[str, tuple[str, str]] = field(default_factory=dict)  # audience -> state, why


@dataclass
class IncidentRecords:
    """The incident tables as read before the walk, and what the walk met of them."""

    incidents: dict[int, dict[str, Any]] = field(default_factory=dict)
    obligations: dict[int, dict[str, _Obligation]] = field(default_factory=dict)
    scheduled: dict[tuple[str, str], tuple[datetime, int]] = field(default_factory=dict)
    said: dict[int, _Said] = field(default_factory=dict)

    async def read(self, conn: AsyncConnection) -> None:
        """Read the tables (before the walk, in the walk's snapshot)."""
        for row in await conn.execute(
            sa.select(
                _incidents.c.id,
                _incidents.c.state,
                _incidents.c.summary,
                _incidents.c.scenario,
                _incidents.c.queue,
                _incidents.c.lead,
                _incidents.c.lead_platform,
                _incidents.c.lead_account,
                _incidents.c.blocks_redrive,
            ).order_by(_incidents.c.id)
        ):
            self.incidents[int(row.id)] = dict(row._mapping)
        for o in await conn.execute(
            sa.select(
                _obligations.c.id,
                _obligations.c.incident_id,
                _obligations.c.audience,
                _obligations.c.state,
                _obligations.c.due_at,
                _obligations.c.reminders,
            ).order_by(_obligations.c.id)
        ):
            self.obligations.setdefault(int(o.incident_id), {})[str(o.audience)] = _Obligation(
                int(o.id), str(o.audience), str(o.state), _utc(o.due_at), int(o.reminders or 0)
            )
        for kind, subject, due_at, attempts in await conn.execute(
            sa.select(
                _schedule.c.kind, _schedule.c.subject, _schedule.c.due_at, _schedule.c.attempts
            ).where(_schedule.c.kind.in_([REMIND, DEADLINE]))
        ):
            self.scheduled[(str(kind), str(subject))] = (_utc(due_at), int(attempts or 0))

    @property
    def records(self) -> int:
        return len(self.incidents)

    def meet(self, row: sa.RowMapping) -> None:
        action, subject = row["action"], row["subject"] or ""
        if not action.startswith("incident.") or not subject.startswith("INC-"):
            return
        if not subject[4:].isdigit():
            return
        number = int(subject[4:])
        if action == "incident.declared":
            details = loads(row["details"])
            if not isinstance(details, dict):
                details = {}
            recorded = details.get("obligations")
            until = details.get("blocks_redrives_until")
            self.said[number] = _Said(
                event=int(row["id"]),
                summary=row["reason"],
                scenario=details.get("scenario"),
                queue=row["queue"],
                lead=row["actor_person"],
                lead_platform=row["actor_platform"],
                lead_account=row["actor_account"],
                recorded=recorded if isinstance(recorded, list) else None,
                hold_recorded="blocks_redrives_until" in details,
                holds_until=str(until) if until else None,
            )
            return
        said = self.said.get(number)
        if said is None:
            return  # an event of an incident the trail never declared: reported by its row
        if action == "incident.resolved":
            said.resolved = True
        elif action == "incident.lead_changed":
            details = loads(row["details"])
            to = details.get("to") if isinstance(details, dict) else None
            if isinstance(to, dict):
                said.lead = to.get("person")
                said.lead_platform = to.get("platform")
                said.lead_account = to.get("account")
                said.lead_event = f"incident.lead_changed event {row['id']}"
        elif action == "incident.restore_done":
            details = loads(row["details"])
            if isinstance(details, dict) and isinstance(details.get("step"), str):
                said.restored.add(details["step"])
        elif action in ("incident.notified", "incident.deadline_missed"):
            details = loads(row["details"])
            audience = str(details.get("audience"))
            if audience in said.decided:
                return  # the first word on a communication decides it
            if action == "incident.deadline_missed":
                said.decided[audience] = ("missed", f"incident.deadline_missed event {row['id']}")
            elif details.get("late"):
                said.decided[audience] = ("missed", f"late incident.notified event {row['id']}")
            else:
                said.decided[audience] = ("met", f"incident.notified event {row['id']}")

    def problems(self, now: datetime) -> list[str]:
        """Each row that does not say what the trail says, in incident order."""
        found: list[str] = []
        for number, incident in self.incidents.items():
            said = self.said.get(number)
            if said is None:
                found.append(
                    f"qb_incidents row {number} (INC-{number}) has no incident.declared event"
                )
                continue
            found += self._incident(number, incident, said)
            found += self._communications(number, said, now)
        for number, said in self.said.items():
            if number not in self.incidents:
                found.append(
                    f"qb_incidents has no row {number} for INC-{number}, which incident.declared "
                    f"event {said.event} declared"
                )
        return found

    def _incident(self, number: int, row: dict[str, Any], said: _Said) -> list[str]:
        where = f"qb_incidents row {number} (INC-{number})"
        found: list[str] = []
        state = "resolved" if said.resolved else "open"
        if row["state"] != state:
            why = "its incident.resolved event" if said.resolved else "no incident.resolved event"
            found.append(
                f"{where}: state is {_shown(row['state'])} but the trail says {state!r} ({why})"
            )
        declared = f"its incident.declared event {said.event}"
        for column, trail, by in (
            ("summary", said.summary, declared),
            ("scenario", said.scenario, declared),
            ("queue", said.queue, declared),
            ("lead", said.lead, said.lead_event or declared),
            ("lead_platform", said.lead_platform, said.lead_event or declared),
            ("lead_account", said.lead_account, said.lead_event or declared),
        ):
            if row[column] != trail:
                found.append(
                    f"{where}: {column} is {_shown(row[column])} but {by} says {_shown(trail)}"
                )
        if said.hold_recorded:
            until = said.holds_until
            holds = until is not None and until not in said.restored
            if bool(row["blocks_redrive"]) != holds:
                why = (
                    "its runbook holds none"
                    if until is None
                    else f"no incident.restore_done of {until}"
                    if holds
                    else f"its incident.restore_done of {until}"
                )
                found.append(
                    f"{where}: blocks_redrive is {bool(row['blocks_redrive'])} but the trail "
                    f"says {holds} ({why})"
                )
        return found

    def _communications(self, number: int, said: _Said, now: datetime) -> list[str]:
        found: list[str] = []
        rows = self.obligations.get(number, {})
        recorded = {str(r.get("audience")): r for r in said.recorded or []}
        if said.recorded is not None:
            for audience, entry in recorded.items():
                row = rows.get(audience)
                if row is None:
                    found.append(
                        f"qb_incident_obligations has no row for INC-{number}'s {audience} "
                        f"(row {entry.get('id')}) that its incident.declared event "
                        f"{said.event} records"
                    )
                elif row.id != entry.get("id") or row.due_at != _parsed(entry.get("due_at")):
                    found.append(
                        f"qb_incident_obligations row {row.id} (INC-{number}, {audience}): due "
                        f"{row.due_at.isoformat()} but its incident.declared event "
                        f"{said.event} records row {entry.get('id')} due {entry.get('due_at')}"
                    )
            for audience, row in rows.items():
                if audience not in recorded:
                    found.append(
                        f"qb_incident_obligations row {row.id} (INC-{number}, {audience}) is "
                        f"not among the communications its incident.declared event "
                        f"{said.event} records"
                    )
        for audience, row in rows.items():
            state, why = said.decided.get(
                audience, ("pending", "no incident.notified or incident.deadline_missed event")
            )
            where = f"qb_incident_obligations row {row.id} (INC-{number}, {audience})"
            if row.state != state:
                found.append(
                    f"{where}: state is {_shown(row.state)} but the trail says {state!r} ({why})"
                )
            if state == "pending" and not said.resolved:
                found += self._timers(number, row, recorded.get(audience), now)
        return found

    def _timers(
        self, number: int, row: _Obligation, entry: dict[str, Any] | None, now: datetime
    ) -> list[str]:
        """A pending communication's timers that the schedule no longer holds, or holds
        later than the trail says."""
        found: list[str] = []
        what = f"INC-{number}, {row.audience}"
        due = _parsed(entry.get("due_at")) if entry else None
        due = due or row.due_at
        deadline = self.scheduled.get((DEADLINE, str(row.id)))
        said = "the trail says it is pending (no incident.notified, deadline_missed or resolved)"
        if deadline is None:
            found.append(
                f"qb_schedule has no {DEADLINE} {row.id} ({what}, due {due.isoformat()}): "
                f"{said}, so its escalation would never come"
            )
        else:
            at, attempts = deadline
            moved = at != due if attempts == 0 else at > max(due, now) + MAX_BACKOFF + SKEW
            if moved:
                found.append(
                    f"qb_schedule's {DEADLINE} {row.id} ({what}) is due {at.isoformat()} but "
                    f"the trail says {due.isoformat()}"
                    + ("" if attempts == 0 else f", later than a retry ({attempts}) moves it")
                )
        if entry is None or now + SKEW >= due:
            return found
        gone: list[str] = []
        for subject, at_text in entry.get("reminders") or []:
            if (REMIND, str(subject)) in self.scheduled:
                continue
            when = _parsed(at_text)
            if when is not None and when > now + SKEW:
                found.append(
                    f"qb_schedule has no {REMIND} {subject} ({what}, due {at_text}): its time "
                    f"has not come, so it cannot have been sent"
                )
            else:
                gone.append(str(subject))
        if len(gone) > row.reminders:
            found.append(
                f"qb_schedule has no {REMIND} {', '.join(gone)} ({what}): "
                f"{len(gone)} reminder(s) gone but qb_incident_obligations row {row.id} says "
                f"{row.reminders} sent"
            )
        return found


def _parsed(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return _utc(datetime.fromisoformat(value))
    except ValueError:
        return None
