"""pg-boss keeps every queue's jobs in ``pgboss.job`` (one partition per queue; ``name``
is the queue and the job's type at once): a job is ``failed`` when it ran out of retries
(dead), ``retry`` while it waits for pg-boss to retry it (counted as pending: it will
run again by itself); ``output`` holds the last
error (``output->>'message'``). pg-boss retries a failed job by putting it in ``retry``
with one more retry allowed, its completion time cleared and its start not in the past;
its fetch counts the attempt. Finished jobs move to ``pgboss.archive`` after a while: a
job gone between a request and its approval is reported as skipped."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from services.estate import args_like
from services.estate.model import CanonicalState
from services.estate.system import Columns, SystemProfile
from services.estate.tables import BoundTable, TableSpec


class PgBossProfile(SystemProfile):
    name = "pg-boss"
    system = "pg-boss"
    default_schema = "pgboss"
    specs = (
        TableSpec(
            "job",
            "job",
            required=(
                "id",
                "name",
                "state",
                "retry_count",
                "retry_limit",
                "output",
                "created_on",
                "start_after",
                "started_on",
                "completed_on",
            ),
            optional={"data": args_like.ABSENT},
        ),
    )
    cols = Columns(
        id="id",
        state="state",
        queue="name",
        attempts="retry_count",
        kind="name",
        max_attempts="retry_limit",
        args="data",
    )
    states = {
        "created": CanonicalState.PENDING,
        # failed, waiting for pg-boss's own retry: it runs again by itself, and a redrive
        # puts a dead job here as pg-boss's own retry does
        "retry": CanonicalState.PENDING,
        "active": CanonicalState.IN_FLIGHT,
        "completed": CanonicalState.SUCCEEDED,
        "cancelled": CanonicalState.CANCELLED,
        "failed": CanonicalState.DEAD,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    deleted_by = "pg-boss moves finished jobs, failed ones too, to its archive after a while"
    retry_state = "retry"
    cancel_state = "cancelled"
    restored = ("state", "retry_count", "retry_limit", "completed_on", "start_after")
    attempts_label = "retries"  # retry_count: the attempts after the first
    # no index of pg-boss finds its failed jobs (its own lead with the queue, for its fetch)
    dead_index_columns = ("name", "completed_on")

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        output = self.col(t, "output")
        text: sa.ColumnElement[Any] = sa.type_coerce(output, postgresql.JSONB)["message"].astext
        return text

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "completed_on")

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "created_on")

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "start_after")

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "started_on")

    def retry_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        count, limit = self.col(t, "retry_count"), self.col(t, "retry_limit")
        return {
            "state": self.retry_state,
            "retry_limit": sa.func.greatest(limit, count + 1),
            "completed_on": None,
            "start_after": sa.func.greatest(self.col(t, "start_after"), sa.func.now()),
        }

    def cancel_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        completed = sa.func.coalesce(self.col(t, "completed_on"), sa.func.now())
        return {"state": self.cancel_state, "completed_on": completed}
