"""What the worker_queue reads say of a team's table: the notes of what triage leaves out,
the refusals of a filter the table cannot take (pointing only at filters it can), and a
stuck row's note, each by the columns the table has and by the team's own names."""

from __future__ import annotations

from datetime import datetime

from services.errors import UsageError
from services.estate.tables import BoundTable


def no_column(queue: str, column: str, what: str) -> UsageError:
    """The refusal of a read the table lacks ``column`` for."""
    return UsageError(
        f"queue {queue!r} (worker_queue) has no {column} column, so {what}; "
        "see `queuebot config check` for what this queue's table turns off"
    )


def notes(q: BoundTable) -> list[str]:
    """What triage leaves out for lack of an optional column."""
    said = []
    if not q.has("job_type"):
        said.append("no job_type column: no breakdown by job type")
    if not q.has("failure_reason"):
        said.append("no failure_reason column: no breakdown by failure reason")
    if not q.has("issue_number"):
        said.append("no issue_number column: duplicates are not detected")
    claimed = q.c("claimed_at").name  # the team's own name for it
    if q.has("started_at") and not q.has("heartbeat_at"):
        started = q.c("started_at").name
        said.append(f"no heartbeat_at column: stuck is judged by {started}, else {claimed}")
    elif not q.has("heartbeat_at"):
        said.append(f"no heartbeat_at or started_at column: stuck is judged by {claimed}")
    return said


def ways_out(q: BoundTable) -> str:
    """The /queue dlq filters this table supports, for a refusal to point at."""
    flags = [
        flag
        for flag, column in (("--failure-reason", "failure_reason"), ("--job-type", "job_type"))
        if q.has(column)
    ]
    flags.append("--error-like")
    return flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} or {flags[-1]}"


def no_filter(queue: str, q: BoundTable, column: str) -> UsageError:
    return UsageError(
        f"queue {queue!r} (worker_queue) has no {column} column, so dead letters "
        f"cannot be selected by it; select by {ways_out(q)} instead"
    )


def running_note(
    q: BoundTable, signs: dict[str, datetime | None], now: datetime
) -> tuple[str, str]:
    """What a stuck running row's note says, by the columns the table has: its stale
    heartbeat, else when it started, else when it was claimed (by the team's own name);
    (note, " for AGE" where the note reads on with one)."""
    if q.has("heartbeat_at"):
        since = next((v for v in signs.values() if v is not None), None)
        return "running, heartbeat stale", f" for {minutes(now, since)}" if since else ""
    started = signs.get("started_at")
    if started is not None:
        return f"running, started {minutes(now, started)} ago; no heartbeat kept", ""
    claimed, column = signs.get("claimed_at"), q.c("claimed_at").name
    ago = f" {minutes(now, claimed)} ago" if claimed is not None else ""
    word = column.removesuffix("_at")
    named = f"{word}{ago} ({column})" if word != column else f"{column}{ago}"
    kept = "heartbeat" if q.has("started_at") else "heartbeat or start time"
    return f"running, {named}; no {kept} kept", ""


def minutes(now: datetime, since: datetime) -> str:
    n = int((now - since).total_seconds() // 60)
    return f"{n // 60}h{n % 60:02d}m" if n >= 60 else f"{n}m"
