"""The plans made under an incident, as lines of its timeline: each wave as the plan's row
keeps it (``waves``: when it started and finished, how many it redrove, how many
succeeded and died again), and what happened to the plan as the audit trail records it
(halted and why, resumed on which request, completed, rolled back, closed).

One line per event. A run of ``FOLD`` or more clean waves in a row (each finished, none
of its jobs dead again or rolled back, nothing else happening to the plan meanwhile) is
one line: "P-1 waves 2-7 ran: ...". The sample always has lines of its own.

Read-only steps in the caller's transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import Approval, AuditEvent, ChangeRequest, Plan
from services.estate.profile import as_utc
from services.incidents.model import TimelineEntry
from services.jsonable import loads
from services.plans.model import Wave, WaveOutcome, Waves

PLANS = cast(sa.Table, Plan.__table__)
EVENTS = cast(sa.Table, AuditEvent.__table__)
REQUESTS = cast(sa.Table, ChangeRequest.__table__)
APPROVALS = cast(sa.Table, Approval.__table__)
ACTIONS = ("plan.halted", "plan.resumed", "plan.completed", "plan.rolled_back", "plan.closed")
FOLD = 3  # this many clean waves in a row, or more, are one line
# At one instant: a resume before the wave it lets start, a wave's end before the halt or
# the completion it brings.
_RANK = {"plan.resumed": 0, "plan.wave_started": 1, "plan.wave_finished": 2, "plan.waves": 2}
_LAST = 3
_HEADED = re.compile(r"^halted:\s*", re.IGNORECASE)  # the halt's own note starts "HALTED: "


@dataclass(frozen=True)
class _Event:
    action: str
    at: datetime
    person: str | None
    reason: str | None
    details: Mapping[str, Any]


async def entries(conn: AsyncConnection, name: str) -> list[TimelineEntry]:
    """The timeline lines of the plans made under incident ``name``, in time order."""
    plans = (
        await conn.execute(
            sa.select(PLANS.c.id, PLANS.c.total, PLANS.c.waves)
            .where(PLANS.c.incident == name)
            .order_by(PLANS.c.id)
        )
    ).all()
    if not plans:
        return []
    events = await _events(conn, [f"P-{p[0]}" for p in plans])
    lines: list[tuple[int, TimelineEntry]] = []
    for number, total, data in plans:
        ref = f"P-{number}"
        waves = Waves.model_validate(data).waves
        own = events.get(ref, [])
        lines += wave_lines(ref, int(total), waves, [e.at for e in own])
        for event in own:
            lines.append((_RANK.get(event.action, _LAST), await _line(conn, ref, event, waves)))
    lines.sort(key=lambda ranked: (ranked[1].at, ranked[0]))
    return [entry for _, entry in lines]


async def _events(conn: AsyncConnection, refs: Sequence[str]) -> dict[str, list[_Event]]:
    """The audit trail's events of these plans (``ACTIONS``), by plan, in order."""
    found = await conn.execute(
        sa.select(
            EVENTS.c.subject,
            EVENTS.c.action,
            EVENTS.c.occurred_at,
            EVENTS.c.actor_person,
            EVENTS.c.reason,
            EVENTS.c.details,
        )
        .where(EVENTS.c.subject.in_(list(refs)), EVENTS.c.action.in_(ACTIONS))
        .order_by(EVENTS.c.id)
    )
    events: dict[str, list[_Event]] = {}
    for subject, action, at, person, reason, details in found.all():
        said = loads(details) if isinstance(details, str) else details
        events.setdefault(str(subject), []).append(
            _Event(str(action), _utc(at), person, reason, said if isinstance(said, dict) else {})
        )
    return events


def _clean(wave: Wave) -> bool:
    return (
        wave.number > 0
        and wave.finished_at is not None
        and wave.outcome is WaveOutcome.OK
        and wave.redead == 0
        and wave.unknown == 0
        and wave.rolled_back == 0
    )


def _runs(waves: Sequence[Wave], events: Sequence[datetime]) -> list[list[Wave]]:
    """The waves in order, clean ones in a row grouped while nothing else happened to
    the plan between the first's start and the last's end."""
    runs: list[list[Wave]] = []
    for wave in sorted(waves, key=lambda w: w.number):
        run = runs[-1] if runs else None
        if (
            run is not None
            and _clean(wave)
            and _clean(run[-1])
            and run[-1].number == wave.number - 1
            and wave.finished_at is not None
            and not any(run[0].started_at < at < wave.finished_at for at in events)
        ):
            run.append(wave)
        else:
            runs.append([wave])
    return runs


def wave_lines(
    ref: str, total: int, waves: Sequence[Wave], events: Sequence[datetime]
) -> list[tuple[int, TimelineEntry]]:
    """The lines of plan ``ref``'s waves (``total``: its jobs), each with its rank at one
    instant; ``events``: when anything else happened to the plan (it breaks a run)."""
    lines: list[tuple[int, TimelineEntry]] = []
    for run in _runs(waves, events):
        if len(run) >= FOLD:
            first, last = run[0], run[-1]
            assert last.finished_at is not None
            text = (
                f"{ref} waves {first.number}-{last.number} ran: "
                f"{sum(w.changed for w in run):,} job(s) redriven, "
                f"{sum(w.succeeded for w in run):,} succeeded, none died again "
                f"(the last finished at {_utc(last.finished_at):%H:%M:%S} UTC)"
            )
            lines.append((_RANK["plan.waves"], _entry(first.started_at, "plan.waves", text)))
            continue
        for wave in run:
            started = f"{ref} {wave.label} started: {wave.changed:,} job(s) redriven"
            if wave.number == 0:
                started += f", of {total:,} in the plan"
            if wave.skipped:
                started += f"; {wave.skipped:,} had moved on and were left alone"
            lines.append(
                (_RANK["plan.wave_started"], _entry(wave.started_at, "plan.wave_started", started))
            )
            if wave.finished_at is None:
                continue
            finished = (
                f"{ref} {wave.label} finished: {wave.succeeded:,} succeeded, "
                f"{wave.redead:,} died again"
            )
            if wave.unknown:
                finished += f", {wave.unknown:,} left the table with their outcome unknown"
            if wave.rolled_back:
                finished += f", {wave.rolled_back:,} rolled back"
            lines.append(
                (
                    _RANK["plan.wave_finished"],
                    _entry(wave.finished_at, "plan.wave_finished", finished),
                )
            )
    return lines


async def _line(
    conn: AsyncConnection, ref: str, event: _Event, waves: Sequence[Wave]
) -> TimelineEntry:
    """One audit event of the plan as its line."""
    reason = _HEADED.sub("", event.reason or "")
    why = f": {reason}" if reason else ""
    if event.action == "plan.halted":
        by = f" by {event.person}" if event.person else ""  # else queuebot halted it
        text = f"{ref} halted{by}{why}"
    elif event.action == "plan.resumed":
        text = f"{ref} resumed on {await _asked(conn, event)}"
    elif event.action == "plan.rolled_back":
        back = len(event.details.get("rolled_back") or [])
        text = (
            f"{ref} rolled back on {await _asked(conn, event)}; {back:,} unclaimed job(s) "
            "returned to the dead letters"
        )
    elif event.action == "plan.closed":
        text = f"{ref} closed by {event.person or '-'}{why}; nothing unclaimed to roll back"
    else:  # plan.completed
        total = int(event.details.get("total") or 0)
        succeeded = sum(w.succeeded for w in waves)
        redead = sum(w.redead for w in waves)
        text = f"{ref} completed: {succeeded:,} of {total:,} succeeded, {redead:,} died again"
        unknown = sum(w.unknown for w in waves)
        if unknown:
            text += f", {unknown:,} left the table with their outcome unknown"
    return TimelineEntry(event.at, event.action, event.person, text)


async def _asked(conn: AsyncConnection, event: _Event) -> str:
    """The request a plan event names, with who asked for it and who approved it."""
    ref = str(event.details.get("request") or "")
    number = ref.removeprefix("CR-")
    if not number.isdigit():
        return ref or "a request"
    requester = (
        await conn.execute(
            sa.select(REQUESTS.c.requester_person).where(REQUESTS.c.id == int(number))
        )
    ).scalar_one_or_none()
    approvers = (
        (
            await conn.execute(
                sa.select(APPROVALS.c.person)
                .where(APPROVALS.c.request_id == int(number), APPROVALS.c.decision == "approve")
                .order_by(APPROVALS.c.id)
            )
        )
        .scalars()
        .all()
    )
    return f"{ref}: asked by {requester or '-'}, approved by {', '.join(approvers) or '-'}"


def _entry(at: datetime, kind: str, text: str) -> TimelineEntry:
    return TimelineEntry(_utc(at), kind, None, text)


def _utc(value: datetime) -> datetime:
    converted = as_utc(value)
    assert converted is not None
    return converted
