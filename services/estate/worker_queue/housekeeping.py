"""What housekeeping may change on a worker_queue table: the retry worker's Parts A-F,
each as guarded set-based statements (``Change``s), by the thresholds of worker_queue's
own settings (``WorkerQueueSettings``, services/config/worker_queue.py). A part whose
columns the team's table lacks, or whose status value the table may not take, is
``Skipped`` with the reason, never attempted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from services.config.worker_queue import WorkerQueueSettings
from services.estate.housekeeping import Change, HousekeepingParts, Skipped
from services.estate.model import CanonicalState
from services.estate.profile import QueueProfile
from services.estate.tables import BoundTable
from services.estate.worker_queue.schema import ACTIVE, CANCELLED, CLAIMED, QUEUED

RETIRED = "failed_permanently"
RETRIED = ("implementation_error", "timeout")  # Part B's reasons
TRIVIAL = ("mutex_collision", "spawn_ram")  # Part E's reasons
OOM = "spawn_oom"
STALE = "stale_duplicate"
DUPLICATE = "other"  # what Part A writes as the failure reason

TITLES = {
    "A": "cancel duplicate queued rows",
    "B": "retry failed rows with backoff; retire retry-exhausted ones once a human is told",
    "C": "delete old stale_duplicate rows",
    "D": "release stuck claimed rows",
    "E": "requeue mutex_collision and spawn_ram failures",
    "F": "re-route spawn_oom failures away from an unavailable node",
}
# The columns each part cannot do without (besides id, status, error_message, queued_at
# and claimed_at, which every worker_queue table has).
NEEDS: dict[str, tuple[str, ...]] = {
    "A": ("issue_number",),
    "B": ("failure_reason", "retry_count", "max_retries", "next_attempt_at"),
    "C": ("failure_reason",),
    "D": ("started_at", "heartbeat_at"),
    "E": ("failure_reason", "retry_count", "max_retries", "next_attempt_at"),
    "F": ("failure_reason", "server_node", "retry_count", "max_retries"),
}
# What each part writes, by state, for the profile's check of the team's [statuses].
WRITES: dict[str, tuple[tuple[CanonicalState, str], ...]] = {
    "A": ((CanonicalState.CANCELLED, CANCELLED),),
    "B": ((CanonicalState.PENDING, QUEUED), (CanonicalState.DEAD, RETIRED)),
    "C": (),
    "D": ((CanonicalState.PENDING, QUEUED),),
    "E": ((CanonicalState.PENDING, QUEUED),),
    "F": ((CanonicalState.PENDING, QUEUED),),
}
NOTE = "queuebot housekeeping"


def skipped(profile: QueueProfile, q: BoundTable, part: str) -> Skipped | None:
    """Why ``part`` cannot run on this table (a missing column, an unwritable status)."""
    missing = [c for c in NEEDS[part] if not q.has(c)]
    if missing:
        names = ", ".join(f"{q.name}.{profile.column_name('queue', c)}" for c in missing)
        return Skipped(part, f"no column {names}")
    problem = profile.unwritable(WRITES[part])
    if problem is not None:
        return Skipped(part, problem)
    return None


def _failed(profile: QueueProfile, q: BoundTable) -> sa.ColumnElement[bool]:
    return q.c("status").in_(profile.statuses_in(CanonicalState.FAILED))


def _set(q: BoundTable, **values: Any) -> dict[str, Any]:
    """Column values by logical name -> by the table's own names; optional ones the
    table lacks are left out."""
    return {q.c(k).name: v for k, v in values.items() if q.has(k)}


def _no_active_sibling(profile: QueueProfile, q: BoundTable) -> list[sa.ColumnElement[bool]]:
    """Not a row whose issue already has a claimed, running or done row: requeued, it
    would only be a duplicate (Part A cancels those), so it is left as it is."""
    if not q.has("issue_number"):
        return []
    issue = q.c("issue_number")
    sibling = q.table.alias("sibling")
    busy = sa.exists().where(
        sibling.c[issue.name] == issue,
        sibling.c[q.c("status").name].in_(profile.statuses_in(*ACTIVE)),
    )
    return [~busy]


def part_a(profile: QueueProfile, q: BoundTable) -> list[Change]:
    """Queued rows of an issue that already has a claimed, running or done row."""
    issue = q.c("issue_number")
    sibling = q.table.alias("sibling")
    active = profile.statuses_in(*ACTIVE)
    busy = sa.exists().where(
        sibling.c[issue.name] == issue, sibling.c[q.c("status").name].in_(active)
    )
    message = (
        sa.literal("duplicate queued row: issue ", sa.Text)
        + sa.cast(issue, sa.Text)
        + sa.literal(" already has a claimed, running or done row (", sa.Text)
        + sa.literal(NOTE, sa.Text)
        + sa.literal(")", sa.Text)
    )
    values = _set(q, status=CANCELLED, failure_reason=DUPLICATE, error_message=message)
    where = [
        q.c("status").in_(profile.statuses_in(CanonicalState.PENDING)),
        issue.is_not(None),
        busy,
    ]
    return [Change("A", "cancelled as duplicates", where, values, {"issue": issue})]


def part_b_retries(
    profile: QueueProfile, q: BoundTable, config: WorkerQueueSettings, now: datetime
) -> list[Change]:
    """Failed implementation_error / timeout rows with retries left, back to queued with
    the backoff of their next retry: one statement, the wait chosen per row by its retry
    count (the report splits its rows by the backoff each got)."""
    retries, most = q.c("retry_count"), q.c("max_retries")
    where = [
        _failed(profile, q),
        q.c("failure_reason").in_(RETRIED),
        retries < most,
        *_no_active_sibling(profile, q),
    ]
    steps = len(config.retry_backoff_minutes)
    kind = q.c("next_attempt_at").type

    def at(retry: int) -> sa.ColumnElement[Any]:
        return sa.literal(now + timedelta(minutes=config.backoff(retry)), kind)

    when = sa.case(*((retries == k - 1, at(k)) for k in range(1, steps)), else_=at(steps))
    values = _set(q, status=QUEUED, retry_count=retries + 1, next_attempt_at=when)

    def what(facts: Mapping[str, Any]) -> str:
        return f"requeued with a {config.backoff(int(facts['retry']))} min backoff"

    return [
        Change(
            "B",
            "requeued with backoff",
            where,
            values,
            facts={"retry": retries + 1, "max_retries": most, **_issue(q)},
            after={"retry": retries, "max_retries": most, **_issue(q)},
            what_of=what,
        )
    ]


def part_b_exhausted(profile: QueueProfile, q: BoundTable) -> list[sa.ColumnElement[bool]]:
    """The guard of retry-exhausted implementation_error / timeout rows."""
    return [
        _failed(profile, q),
        q.c("failure_reason").in_(RETRIED),
        q.c("retry_count") >= q.c("max_retries"),
    ]


def exhausted_facts(q: BoundTable) -> dict[str, sa.ColumnElement[Any]]:
    facts: dict[str, sa.ColumnElement[Any]] = {
        "retry": q.c("retry_count"),
        "max_retries": q.c("max_retries"),
        "reason": q.c("failure_reason"),
        "error": q.c("error_message"),
        **_issue(q),
    }
    for optional in ("github_issue_number", "job_type"):
        if q.has(optional):
            facts[optional] = q.c(optional)
    return facts


def part_b_retire(profile: QueueProfile, q: BoundTable, notified: Sequence[Any]) -> list[Change]:
    """Retire the retry-exhausted rows a human was told of, and only those."""
    if not notified:
        return []
    where = [*part_b_exhausted(profile, q), q.isin("id", list(notified))]
    return [Change("B", f"retired to {RETIRED}", where, _set(q, status=RETIRED))]


def part_c(
    profile: QueueProfile, q: BoundTable, config: WorkerQueueSettings, now: datetime
) -> list[Change]:
    """Cancelled (or failed) stale_duplicate rows queued before the cutoff: deleted."""
    cutoff = now - timedelta(hours=config.stale_duplicate_hours)
    where = [
        q.c("status").in_(profile.statuses_in(CanonicalState.CANCELLED, CanonicalState.FAILED)),
        q.c("failure_reason") == STALE,
        q.c("queued_at") < cutoff,
    ]
    return [Change("C", "deleted", where, None)]


def part_d(q: BoundTable, config: WorkerQueueSettings, now: datetime) -> list[Change]:
    """Claimed rows never started, with no heartbeat, claimed before the cutoff."""
    cutoff = now - timedelta(minutes=config.stuck_claim_minutes)
    where = [
        q.c("status").in_(q.takes("status", [CLAIMED])),  # an enum may lack it
        q.c("started_at").is_(None),
        q.c("heartbeat_at").is_(None),
        q.c("claimed_at") < cutoff,
    ]
    message = (
        f"released by {NOTE}: claimed for over {config.stuck_claim_minutes} min with no "
        "start and no heartbeat (the spawn likely failed silently)"
    )
    values = _set(q, status=QUEUED, claimed_at=None, error_message=message)
    return [Change("D", "released to queued", where, values, _issue(q))]


def part_e(
    profile: QueueProfile, q: BoundTable, config: WorkerQueueSettings, now: datetime
) -> list[Change]:
    """mutex_collision and spawn_ram failures with retries left, back to queued."""
    retries, most = q.c("retry_count"), q.c("max_retries")
    changes = []
    for reason, wait in (
        ("mutex_collision", config.mutex_collision_minutes),
        ("spawn_ram", config.spawn_ram_minutes),
    ):
        where = [
            _failed(profile, q),
            q.c("failure_reason") == reason,
            retries < most,
            *_no_active_sibling(profile, q),
        ]
        values = _set(
            q, status=QUEUED, retry_count=retries + 1, next_attempt_at=now + timedelta(minutes=wait)
        )
        what = f"{reason} requeued" + (f" with a {wait} min backoff" if wait else " at once")
        changes.append(Change("E", what, where, values, _issue(q)))
    return changes


def oom_window(q: BoundTable) -> sa.ColumnElement[Any]:
    """When a spawn_oom row last did something: the latest sign of life the table keeps
    (heartbeat, start, claim), else when it was queued. The table records no failure time."""
    signs = [q.c(c) for c in ("heartbeat_at", "started_at") if q.has(c)]
    return sa.func.coalesce(*signs, q.c("claimed_at"), q.c("queued_at"))


def oom_where(
    profile: QueueProfile, q: BoundTable, config: WorkerQueueSettings, now: datetime
) -> list[sa.ColumnElement[bool]]:
    since = now - timedelta(minutes=config.oom_window_minutes)
    return [
        _failed(profile, q),
        q.c("failure_reason") == OOM,
        q.c("server_node").is_not(None),
        oom_window(q) >= since,
    ]


def part_f(
    profile: QueueProfile,
    q: BoundTable,
    config: WorkerQueueSettings,
    now: datetime,
    nodes: Sequence[str],
) -> list[Change]:
    """The recent spawn_oom failures of unavailable ``nodes``, with retries left: back to
    queued with no node and no node preference, so the dispatcher picks a healthy one."""
    if not nodes:
        return []
    retries, most = q.c("retry_count"), q.c("max_retries")
    values = _set(
        q, status=QUEUED, retry_count=retries + 1, server_node=None, server_preference=None
    )
    return [
        Change(
            "F",
            f"re-routed away from {node}",
            [
                *oom_where(profile, q, config, now),
                q.c("server_node") == node,
                retries < most,
                *_no_active_sibling(profile, q),
            ],
            values,
            facts=_issue(q),
        )
        for node in nodes
    ]


def _issue(q: BoundTable) -> dict[str, sa.ColumnElement[Any]]:
    return {"issue": q.c("issue_number")} if q.has("issue_number") else {}


class WorkerQueueHousekeeping(HousekeepingParts):
    """Parts A-F on the queue table."""

    role = "queue"
    titles = TITLES
    queued = QUEUED
    retired = RETIRED
    tripped_by = OOM

    def __init__(self, profile: QueueProfile) -> None:
        self.profile = profile

    def skipped(self, q: BoundTable, part: str) -> Skipped | None:
        return skipped(self.profile, q, part)

    def changes(
        self, q: BoundTable, part: str, config: WorkerQueueSettings, now: datetime
    ) -> list[Change]:
        if part == "A":
            return part_a(self.profile, q)
        if part == "B":
            return part_b_retries(self.profile, q, config, now)
        if part == "C":
            return part_c(self.profile, q, config, now)
        if part == "D":
            return part_d(q, config, now)
        if part == "E":
            return part_e(self.profile, q, config, now)
        return []

    def exhausted_where(self, q: BoundTable) -> list[sa.ColumnElement[bool]]:
        return part_b_exhausted(self.profile, q)

    def exhausted_facts(self, q: BoundTable) -> dict[str, sa.ColumnElement[Any]]:
        return exhausted_facts(q)

    def retry_at(self, q: BoundTable) -> sa.ColumnElement[Any]:
        return q.c("next_attempt_at")

    def retire(self, q: BoundTable, notified: Sequence[Any]) -> list[Change]:
        return part_b_retire(self.profile, q, notified)

    def node(self, q: BoundTable) -> sa.ColumnElement[Any]:
        return q.c("server_node")

    def tripped_where(
        self, q: BoundTable, config: WorkerQueueSettings, now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        return oom_where(self.profile, q, config, now)

    def trip_rule(self, config: WorkerQueueSettings) -> tuple[int, timedelta]:
        return config.oom_threshold, timedelta(minutes=config.oom_window_minutes)

    def release_note(self, config: WorkerQueueSettings) -> str:
        return f"claimed over {config.stuck_claim_minutes} min ago, never started and no heartbeat"

    def reroute(
        self, q: BoundTable, config: WorkerQueueSettings, now: datetime, nodes: Sequence[str]
    ) -> list[Change]:
        return part_f(self.profile, q, config, now, nodes)
