"""What a housekeeping run did (or, dry, would do): per queue, per part, the rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.message import Heading, Message, Text

SHOWN = 20  # row ids listed per statement in a summary; the audit event has them all


@dataclass(frozen=True)
class RowChange:
    id: str
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One guarded statement's rows."""

    part: str
    what: str
    rows: list[RowChange] = field(default_factory=list)


@dataclass
class PartReport:
    part: str
    title: str  # what the part does, as the queue's profile names it
    skipped: str | None = None  # why the part did not run
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. rows that stay failed, and why

    @property
    def changed(self) -> int:
        return sum(len(s.rows) for s in self.steps)


@dataclass
class QueueReport:
    queue: str
    profile: str
    parts: list[PartReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the message-queue report, ...

    @property
    def changed(self) -> int:
        return sum(p.changed for p in self.parts)


@dataclass
class RunReport:
    at: datetime
    dry_run: bool
    locked_out: bool = False  # another run held the lock: this one did nothing
    queues: list[QueueReport] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(q.changed for q in self.queues)

    def rows(self) -> dict[tuple[str, str, str], list[str]]:
        """(queue, part, what) -> row ids: what the dry run and the real run compare."""
        return {
            (q.queue, s.part, s.what): [r.id for r in s.rows]
            for q in self.queues
            for p in q.parts
            for s in p.steps
            if s.rows
        }

    def headline(self) -> str:
        when = f"{self.at:%Y-%m-%d %H:%M} UTC"
        if self.locked_out:
            return f"housekeeping {when}: skipped, another run holds the lock (it does the work)"
        verb = "would change" if self.dry_run else "changed"
        label = "dry run" if self.dry_run else "run"
        return f"housekeeping {label} {when}: {verb} {self.changed} row(s)"

    def lines(self) -> list[str]:
        lines = [self.headline()]
        if self.locked_out:
            return lines
        would = "would be " if self.dry_run else ""
        for q in self.queues:
            lines.append(f"queue {q.queue} ({q.profile}): {q.changed} row(s)")
            for p in q.parts:
                title = f"  Part {p.part} ({p.title})"
                if p.skipped is not None:
                    lines.append(f"{title}: skipped: {p.skipped}")
                    continue
                shown = [s for s in p.steps if s.rows]
                lines.append(f"{title}: {p.changed or 'nothing'}")
                for s in shown:
                    ids = ", ".join(r.id for r in s.rows[:SHOWN])
                    more = f" and {len(s.rows) - SHOWN} more" if len(s.rows) > SHOWN else ""
                    lines.append(f"    {len(s.rows)} {would}{s.what}: {ids}{more}")
                lines.extend(f"    {note}" for note in p.notes)
            lines.extend(f"  {note}" for note in q.notes)
        return lines

    def message(self) -> Message:
        return Message(
            self.headline(),
            (Heading(self.headline()), Text("\n".join(self.lines()[1:]), mono=True)),
        )
