"""GoodJob keeps every queue's jobs in ``good_jobs`` (times without a zone, in UTC). It has
no state column: a job is discarded (dead) when it finished with an error, succeeded when
it finished without one, running while performed and not finished, and otherwise waits to
run (``error`` set: waiting for GoodJob's own retry). Each run is a row of
``good_job_executions``, with its error. Its workers wake on the ``good_job`` NOTIFY.

queuebot's names for what the columns say: ``queued``, ``retried`` (both pending),
``running``, ``succeeded`` and ``discarded`` (dead). A retry is GoodJob's own, on the same
row: performed and finished times cleared, scheduled now, ``error_event`` 3 (retried); the
error stays as the last run's. Cancel is off: GoodJob has no cancelled state, and the job
it discards is a dead job, so a cancel would make a dead letter of a waiting job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate import args_like
from services.estate.model import CanonicalState, JobEvent
from services.estate.profile import as_utc
from services.estate.system import Columns, SystemProfile
from services.estate.system.sql import notify_each, utc, utc_now
from services.estate.tables import BoundTable, TableSpec

QUEUED, RETRIED, RUNNING, SUCCEEDED, DISCARDED = (
    "queued",
    "retried",
    "running",
    "succeeded",
    "discarded",
)
RETRIED_EVENT = 3  # GoodJob's error_event for a job retried


class GoodJobProfile(SystemProfile):
    name = "good_job"
    system = "GoodJob"
    default_schema = "public"
    specs = (
        TableSpec(
            "job",
            "good_jobs",
            required=(
                "id",
                "queue_name",
                "job_class",
                "active_job_id",
                "scheduled_at",
                "performed_at",
                "finished_at",
                "error",
                "error_event",
                "executions_count",
                "created_at",
            ),
            optional={"serialized_params": args_like.ABSENT},
        ),
        TableSpec(
            "executions",
            "good_job_executions",
            required=("active_job_id", "error", "finished_at", "created_at"),
            absent="/queue show lists no runs of a job",
        ),
    )
    cols = Columns(
        id="id",
        state="state",
        queue="queue_name",
        attempts="executions_count",
        kind="job_class",
        args="serialized_params",
    )
    derived_states = True
    set_on_success = "finished_at"  # kept: GoodJob preserves finished jobs by default
    states = {
        QUEUED: CanonicalState.PENDING,
        RETRIED: CanonicalState.PENDING,
        RUNNING: CanonicalState.IN_FLIGHT,
        SUCCEEDED: CanonicalState.SUCCEEDED,
        DISCARDED: CanonicalState.DEAD,
    }
    dead_letter_states = (CanonicalState.DEAD,)
    retry_state = RETRIED
    cancel_off = (
        "GoodJob has no cancelled state, and a job it discards is a dead job: a cancel "
        "would make a dead letter of a waiting job; discard or destroy it in GoodJob's "
        "dashboard"
    )
    restored = ("performed_at", "finished_at", "scheduled_at", "error_event")
    # its finished_at index holds every finished job, succeeded ones too: none finds the
    # discarded ones alone
    dead_index_columns = ("queue_name", "finished_at")

    @property
    def unclaimed_states(self) -> tuple[str, ...]:
        return (QUEUED, RETRIED)

    def state_value(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        finished, error = self.col(t, "finished_at"), self.col(t, "error")
        return sa.case(
            (sa.and_(finished.is_not(None), error.is_not(None)), DISCARDED),
            (finished.is_not(None), SUCCEEDED),
            (self.col(t, "performed_at").is_not(None), RUNNING),
            (error.is_not(None), RETRIED),
            else_=QUEUED,
        )

    def not_succeeded(self, t: Mapping[str, BoundTable], succeeded: str) -> sa.ColumnElement[bool]:
        """The unfinished jobs or the dead ones, written as those two conditions so that
        PostgreSQL reads them from GoodJob's index of unfinished jobs and the optional index
        of dead ones (``estate indexes``) where it has both, not the whole table."""
        return sa.or_(self.col(t, "finished_at").is_(None), self.state_where(t, DISCARDED))

    def state_where(self, t: Mapping[str, BoundTable], value: str) -> sa.ColumnElement[bool]:
        finished, error = self.col(t, "finished_at"), self.col(t, "error")
        performed = self.col(t, "performed_at")
        if value == DISCARDED:
            return sa.and_(finished.is_not(None), error.is_not(None))
        if value == SUCCEEDED:
            return sa.and_(finished.is_not(None), error.is_(None))
        if value == RUNNING:
            return sa.and_(finished.is_(None), performed.is_not(None))
        waiting = sa.and_(finished.is_(None), performed.is_(None))
        return sa.and_(waiting, error.is_not(None) if value == RETRIED else error.is_(None))

    def error_text(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return self.col(t, "error")

    def died_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "finished_at"))

    def enqueued_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "created_at"))

    def waiting_since(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(sa.func.coalesce(self.col(t, "scheduled_at"), self.col(t, "created_at")))

    def started_at(self, t: Mapping[str, BoundTable]) -> sa.ColumnElement[Any]:
        return utc(self.col(t, "performed_at"))

    def retry_values(self, t: Mapping[str, BoundTable], now: datetime) -> dict[str, Any]:
        return {
            "performed_at": None,
            "finished_at": None,
            "scheduled_at": utc_now(),
            "error_event": RETRIED_EVENT,
        }

    async def notify(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], changed: Sequence[tuple[Any, str]]
    ) -> None:
        await notify_each(conn, "good_job", ({"queue_name": q} for _, q in changed))

    async def history(
        self, conn: AsyncConnection, t: Mapping[str, BoundTable], row: Mapping[Any, Any]
    ) -> tuple[list[JobEvent], str | None]:
        runs = t.get("executions")
        if runs is None:
            return [], "no good_job_executions table here: GoodJob's runs are not shown"
        job = row[self.col(t, "active_job_id").name]
        rows = await conn.execute(
            sa.select(runs.c("created_at"), runs.c("finished_at"), runs.c("error"))
            .where(runs.c("active_job_id") == job)
            .order_by(runs.c("created_at"))
        )
        events = []
        for started, finished, error in rows.all():
            what = "run failed" if error else ("run succeeded" if finished else "run started")
            events.append(JobEvent(what, error, as_utc(finished or started)))
        return events, None
