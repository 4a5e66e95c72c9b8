"""A built-in weekly (or any period) rotation: who holds a rota now, until when, and who
is next. From ``start`` the people take turns of ``every``; before ``start`` nobody is on
shift and the first person is next."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.config import ScheduleConfig


@dataclass(frozen=True)
class Shift:
    primary: str | None  # on shift now (None before the schedule starts)
    secondary: str | None  # the next one on shift
    until: datetime  # when the shift hands over


def shift(schedule: ScheduleConfig, now: datetime) -> Shift:
    people = schedule.people
    if now < schedule.start:
        return Shift(primary=None, secondary=people[0], until=schedule.start)
    turns = int((now - schedule.start) // schedule.every)
    until = schedule.start + (turns + 1) * schedule.every
    primary = people[turns % len(people)]
    secondary = people[(turns + 1) % len(people)] if len(people) > 1 else None
    return Shift(primary=primary, secondary=secondary, until=until)
