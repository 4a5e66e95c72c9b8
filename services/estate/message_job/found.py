"""A message_job row as a freeze reads it: the message and its job, by column position
(``Layout``), and what of it a change keeps (``Found``: ids, statuses, the error's
signature, the row's image where queuebot builds it, its version), made into a target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from services.estate.ops import Target
from services.estate.signature import display_signature, error_signature
from services.estate.tables import BoundTable
from services.identifiers import quote_identifier

JOB_PREFIX = "job__"
# PostgreSQL's targets carry no image and no key (the request's items get both from the
# database): one shared empty mapping for both, never written to, rather than 100,000 of each
NOT_KEPT: dict[str, Any] = {}


@dataclass(frozen=True)
class Layout:
    """Where each needed value sits in a row of ``message columns + job columns``."""

    message: tuple[str, ...]
    job: tuple[str, ...]
    msg_id: int
    job_id: int
    status: int
    last_error: int
    job_status: int

    @property
    def split(self) -> int:
        return len(self.message)

    @classmethod
    def of(cls, m: BoundTable, j: BoundTable) -> Layout:
        message = tuple(c.name for c in m.table.c)
        job = tuple(c.name for c in j.table.c)
        return cls(
            message,
            job,
            message.index(m.c("id").name),
            message.index(m.c("job_id").name),
            message.index(m.c("status").name),
            message.index(m.c("last_error").name),
            len(message) + job.index(j.c("status").name),
        )


@dataclass(slots=True)  # not frozen: built 4-5x faster, and there is one per row found
class Found:
    """One message row and its job's row, as found when freezing (never changed after)."""

    message_id: str
    job_id: str
    status: str
    job_status: str
    signature: str  # of the message's last error (the text itself is not kept)
    snapshot: Any  # {"message": {...}, "job": {...}}, or the same as database-built JSON
    version: str | None = None  # PostgreSQL: the message's and the job's xmin

    @classmethod
    def of(cls, row: tuple[Any, ...], layout: Layout) -> Found:
        message = dict(zip(layout.message, row[: layout.split], strict=True))
        job = dict(zip(layout.job, row[layout.split :], strict=True))
        return cls(
            str(row[layout.msg_id]),
            str(row[layout.job_id]),
            str(row[layout.status]),
            str(row[layout.job_status]),
            signature_of(row[layout.last_error]),
            {"message": message, "job": job},
        )

    def target(self, states: dict[tuple[str, str], str]) -> Target:
        """The target; ``states`` keeps one text per pair of statuses (a large request has
        100,000 targets and a handful of states)."""
        pair = (self.status, self.job_status)
        state = states.get(pair)
        if state is None:
            state = states[pair] = f"{self.status}/{self.job_status}"
        return Target(
            id=self.job_id,
            # PostgreSQL copies the items itself and builds their keys (``kept``)
            key=NOT_KEPT
            if self.snapshot is NOT_KEPT
            else {"job_id": self.job_id, "message_id": self.message_id},
            state=state,  # what the guard holds each row to
            signature=self.signature,
            row=self.snapshot,
            version=self.version,
            part=self.message_id,
        )


def row_json(m: BoundTable, j: BoundTable) -> sa.ColumnElement[str]:
    """PostgreSQL builds each row's snapshot as JSON text itself: ten thousand rows need
    no per-column conversion in Python. Table names come from validated configuration."""
    return sa.literal_column(
        f"json_build_object('message', to_json({quote_identifier(m.table.name)}), "
        f"'job', to_json({quote_identifier(j.table.name)}))::text"
    )


def versions(m: BoundTable, j: BoundTable) -> sa.ColumnElement[str]:
    """PostgreSQL: the message's and the job's row versions (xmin), as one text."""
    return sa.literal_column(
        f"{quote_identifier(m.table.name)}.xmin::text || '/' || "
        f"{quote_identifier(j.table.name)}.xmin::text"
    )


def as_text(column: sa.ColumnElement[Any], postgres: bool) -> sa.ColumnElement[Any]:
    """An id read as the text a person reads (PostgreSQL prints a uuid lowercase, as
    ``str(uuid)`` does), so ten thousand ids need no UUID objects to be made and printed."""
    return sa.cast(column, sa.Text) if postgres else column


def once(texts: dict[str, str], text: str) -> str:
    """The one copy of ``text`` kept in ``texts``."""
    return texts.setdefault(text, text)


def signature_of(error: str | None) -> str:
    return display_signature(error_signature(error))


def id_kind(column: sa.Column[Any]) -> tuple[bool, bool]:
    """What ``id_text`` looks at in a column's type."""
    return isinstance(column.type, sa.Uuid), isinstance(column.type, sa.Integer)


def frozen_state(target: Target) -> tuple[str, str]:
    """The (message status, job status) a target was frozen in; requests stored before
    targets kept both say DLQ/FAILED, which is what they were frozen in then."""
    message, sep, job = target.state.partition("/")
    return (message, job) if sep else ("DLQ", "FAILED")
