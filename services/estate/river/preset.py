"""River keeps every queue's jobs in ``river_job``: a job is ``discarded`` when it ran out
of attempts (dead), ``retryable`` while River will retry it by itself; ``errors`` holds
one ``{at, attempt, error, trace}`` per failed attempt. River retries a discarded job by
making it ``available`` again now, with one more attempt allowed where it had none left
and ``finalized_at`` cleared (a CHECK holds it set exactly on finished states); its
workers wake on ``<schema>.river_insert``."""

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
from services.estate.system.sql import last_error, notify_each
from services.estate.tables import BoundTable, TableSpec


class RiverProfile(SystemProfile):
    name = "river"
    system = "River"
    default_schema = "public"
    specs = (
        TableSpec(
            "job",
            "river_job",
            required=(
                "id",
                "state",
                "queue",
                "kind",
                "attempt",
                "max_attempts",
                "errors",
                "created_at",
                "scheduled_at",
                "attempted_at",
                "finalized_at",
            ),
            optional={"args": args_like.ABSENT},
        ),
    )
    cols = Columns(
        id="id",
        state="state",
        queue="queue",
        attempts="attempt",
        kind="kind",
        max_attempts="max_attempts",
        args="args",
    )
    states = {
        "available": CanonicalState.PENDING,
        "scheduled": CanonicalState.PENDING,
        "pending": CanonicalState.PENDING,
        "running": CanonicalState.IN_FLIGHT,
        "retryable": CanonicalState.FAILED,
        "completed": CanonicalState.SUCCEEDED,
        "discarded": CanonicalState.DEAD,
        "cancelled": CanonicalState.CANCELLED,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    deleted_by = "River's cleaner deletes finished jobs after a while, discarded ones too"
    retry_state = "available"
    cancel_state = "cancelled"
    restored = ("state", "attempt", "max_attempts", "finalized_at", "scheduled_at")

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return last_error(self.col(t, "errors"), "error")

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "finalized_at")

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "created_at")

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "scheduled_at")

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "attempted_at")

    def retry_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        attempt, most = self.col(t, "attempt"), self.col(t, "max_attempts")
        return {
            "state": self.retry_state,
            "max_attempts": sa.case((attempt >= most, attempt + 1), else_=most),
            "finalized_at": None,
            "scheduled_at": sa.func.now(),
        }

    def cancel_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        finalized = sa.func.coalesce(self.col(t, "finalized_at"), sa.func.now())
        return {"state": self.cancel_state, "finalized_at": finalized}

    async def notify(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], changed: Sequence[tuple[Any, str]]
    ) -> None:
        await notify_each(conn, f"{self.schema}.river_insert", ({"queue": q} for _, q in changed))

    async def history(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], row: Mapping[Any, Any]
    ) -> tuple[list[JobEvent], str | None]:
        return errors_history(row.get(self.col(t, "errors").name)), None
