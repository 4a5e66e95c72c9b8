"""Oban keeps every queue's jobs in ``oban_jobs`` (under its prefix, ``public`` by
default): a job is ``discarded`` when it ran out of attempts (dead), ``retryable`` while
Oban will retry it by itself; ``errors`` holds one ``{attempt, at, error}`` per failed
attempt, and its times are kept without a zone, in UTC. Oban retries a job by making it
``available`` now with room for one more attempt (a CHECK holds ``attempt`` within
``max_attempts``) and its completed, cancelled and discarded times cleared; its workers
wake on ``<prefix>.oban_insert``. Oban's default pruner deletes discarded jobs after 60 s:
a job pruned between a request and its approval is reported as skipped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import args_like
from services.estate.model import CanonicalState, JobEvent
from services.estate.system import Columns, SystemProfile
from services.estate.system.history import errors_history
from services.estate.system.sql import last_error, notify_each, utc, utc_now
from services.estate.tables import BoundTable, TableSpec


class ObanProfile(SystemProfile):
    name = "oban"
    system = "Oban"
    default_schema = "public"
    specs = (
        TableSpec(
            "job",
            "oban_jobs",
            required=(
                "id",
                "state",
                "queue",
                "worker",
                "attempt",
                "max_attempts",
                "errors",
                "inserted_at",
                "scheduled_at",
                "attempted_at",
                "completed_at",
                "cancelled_at",
                "discarded_at",
            ),
            optional={"args": args_like.ABSENT},
        ),
    )
    cols = Columns(
        id="id",
        state="state",
        queue="queue",
        attempts="attempt",
        kind="worker",
        max_attempts="max_attempts",
        args="args",
    )
    states = {
        "available": CanonicalState.PENDING,
        "scheduled": CanonicalState.PENDING,
        "suspended": CanonicalState.PENDING,
        "executing": CanonicalState.IN_FLIGHT,
        "retryable": CanonicalState.FAILED,
        "completed": CanonicalState.SUCCEEDED,
        "discarded": CanonicalState.DEAD,
        "cancelled": CanonicalState.CANCELLED,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    deleted_by = "Oban's pruner deletes finished jobs, discarded ones too, after 60 s by default"
    retry_state = "available"
    cancel_state = "cancelled"
    restored = (
        "state",
        "attempt",
        "max_attempts",
        "scheduled_at",
        "completed_at",
        "cancelled_at",
        "discarded_at",
    )

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return last_error(self.col(t, "errors"), "error")

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "discarded_at"))

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "inserted_at"))

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "scheduled_at"))

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "attempted_at"))

    def retry_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        attempt, most = self.col(t, "attempt"), self.col(t, "max_attempts")
        return {
            "state": self.retry_state,
            "max_attempts": sa.func.greatest(most, attempt + 1),
            "scheduled_at": utc_now(),
            "completed_at": None,
            "cancelled_at": None,
            "discarded_at": None,
        }

    def cancel_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        return {"state": self.cancel_state, "cancelled_at": utc_now()}

    async def notify(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], changed: Sequence[tuple[Any, str]]
    ) -> None:
        await notify_each(conn, f"{self.schema}.oban_insert", ({"queue": q} for _, q in changed))

    async def history(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], row: Mapping[Any, Any]
    ) -> tuple[list[JobEvent], str | None]:
        return errors_history(row.get(self.col(t, "errors").name)), None
