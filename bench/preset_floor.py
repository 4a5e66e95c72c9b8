"""Triage's floor for ``bench.presets``: the SQL an expert would write by hand, on each
system's own tables, to print the numbers a preset's ``/queue triage`` prints (not a bench
of its own).

Triage prints the jobs by state and by job type, the newest dead jobs' errors (the
``SIGNATURE_SAMPLE`` newest, whose signatures it counts), the oldest waiting job and the
stuck count. The floor reads the same, in the plainest statements that give the same
numbers, run one after another on one connection as psql would:

1. **counts**: one grouped scan by state and job type, with the oldest waiting job and
   the stuck count as FILTERed aggregates of the same scan. Where triage estimates the
   succeeded jobs (a whole table of 500,000 jobs or more: River, Oban, pg-boss,
   Procrastinate, GoodJob, Solid Queue), the scan leaves them out (River's and Oban's by
   listing every other state, which their state index finds) and **estimate** reads
   their number from ``pg_class``. Where triage counts a backlog from a sample
   (graphile-worker and Que, a whole table of 500,000 jobs or more), the scan reads the
   dead and running jobs; **sample** counts the same sample of pages by state and job
   type (``TABLESAMPLE SYSTEM`` with triage's percentage and seed), **sample pages** sums
   each state's count per page and its square (what triage measures each count's error
   from), and **oldest** reads the oldest waiting job on its own (a sample cannot tell
   it).
2. **errors**: the newest dead jobs' error texts, newest first, ``LIMIT`` the sample
   (none on Procrastinate, which keeps no error text).

graphile-worker is read from its private tables (the expert's shortest path), not its
``jobs`` view; one queue of it is its ``job_queue_id``. ``:q`` is the queue of a
``queue_name`` run, ``:cutoff`` the stuck threshold (now less ``stuck_after_minutes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.estate.signature import SIGNATURE_SAMPLE


@dataclass(frozen=True)
class Facts:
    """One system's columns as SQL fragments over ``src`` (its table, aliased ``j``)."""

    src: str
    table: str  # whose statistics give the estimate
    state: str
    kind: str
    wait: str  # when a pending job may run
    pending: str
    stuck: str
    dead: str
    queue: str  # the WHERE of one queue (``:q``)
    succeeded: str | None = None  # the jobs triage estimates on a whole table
    error: str | None = None
    died: str | None = None
    running: str | None = None  # where a sampled triage counts running jobs exactly
    error_src: str | None = None  # what the errors are read from, where not ``src``
    joins: str = ""  # what ``src`` joins to its table (a sample joins the same)


GRAPHILE_STATE = (
    "CASE WHEN j.locked_at IS NOT NULL THEN 'locked'"
    " WHEN j.attempts >= j.max_attempts THEN 'dead'"
    " WHEN j.last_error IS NOT NULL THEN 'retrying' ELSE 'waiting' END"
)
QUE_STATE = (
    "CASE WHEN j.expired_at IS NOT NULL THEN 'expired'"
    " WHEN j.finished_at IS NOT NULL THEN 'finished'"
    " WHEN j.error_count > 0 THEN 'errored' ELSE 'ready' END"
)
GOOD_JOB_STATE = (
    "CASE WHEN j.finished_at IS NOT NULL AND j.error IS NOT NULL THEN 'discarded'"
    " WHEN j.finished_at IS NOT NULL THEN 'succeeded'"
    " WHEN j.performed_at IS NOT NULL THEN 'running'"
    " WHEN j.error IS NOT NULL THEN 'retried' ELSE 'queued' END"
)
SOLID_QUEUE_STATE = (
    "CASE WHEN f.job_id IS NOT NULL THEN 'failed' WHEN c.job_id IS NOT NULL THEN 'claimed'"
    " WHEN r.job_id IS NOT NULL THEN 'ready' WHEN s.job_id IS NOT NULL THEN 'scheduled'"
    " WHEN b.job_id IS NOT NULL THEN 'blocked'"
    " WHEN j.finished_at IS NOT NULL THEN 'finished' ELSE 'unknown' END"
)
PROCRASTINATE_EVENT = (
    "(SELECT {pick}(e.at) FROM procrastinate_events e WHERE e.job_id = j.id AND e.type = '{kind}')"
)

FACTS: dict[str, Facts] = {
    "river": Facts(
        src="river_job j",
        table="river_job",
        state="j.state",
        kind="j.kind",
        wait="j.scheduled_at",
        pending="j.state IN ('available', 'scheduled', 'pending')",
        stuck="j.state = 'running' AND j.attempted_at < :cutoff",
        dead="j.state = 'discarded'",
        queue="j.queue = :q",
        succeeded="j.state IN ('available', 'scheduled', 'pending', 'running', 'retryable',"
        " 'discarded', 'cancelled')",  # every state but completed: its state index finds them
        error="j.errors[array_length(j.errors, 1)]->>'error'",
        died="j.finalized_at",
    ),
    "oban": Facts(
        src="oban_jobs j",
        table="oban_jobs",
        state="j.state",
        kind="j.worker",
        wait="timezone('UTC', j.scheduled_at)",
        pending="j.state IN ('available', 'scheduled', 'suspended')",
        stuck="j.state = 'executing' AND timezone('UTC', j.attempted_at) < :cutoff",
        dead="j.state = 'discarded'",
        queue="j.queue = :q",
        succeeded="j.state IN ('available', 'scheduled', 'suspended', 'executing',"
        " 'retryable', 'discarded', 'cancelled')",
        error="j.errors[array_length(j.errors, 1)]->>'error'",
        died="j.discarded_at",
    ),
    "pg-boss": Facts(
        src="pgboss.job j",
        table="pgboss.job",
        state="j.state",
        kind="j.name",
        wait="j.start_after",
        pending="j.state IN ('created', 'retry')",
        stuck="j.state = 'active' AND j.started_on < :cutoff",
        dead="j.state = 'failed'",
        queue="j.name = :q",
        succeeded="j.state <> 'completed'",
        error="j.output->>'message'",
        died="j.completed_on",
    ),
    "procrastinate": Facts(
        src="procrastinate_jobs j",
        table="procrastinate_jobs",
        state="j.status",
        kind="j.task_name",
        wait="coalesce(j.scheduled_at, "
        + PROCRASTINATE_EVENT.format(pick="min", kind="deferred")
        + ")",
        pending="j.status = 'todo'",
        stuck="j.status IN ('doing', 'aborting') AND "
        + PROCRASTINATE_EVENT.format(pick="max", kind="started")
        + " < :cutoff",
        dead="j.status = 'failed'",
        queue="j.queue_name = :q",
        succeeded="j.status <> 'succeeded'",
    ),
    "graphile-worker": Facts(
        src="graphile_worker._private_jobs j"
        " JOIN graphile_worker._private_tasks t ON t.id = j.task_id",
        joins=" JOIN graphile_worker._private_tasks t ON t.id = j.task_id",
        table="graphile_worker._private_jobs",
        state=GRAPHILE_STATE,
        kind="t.identifier",
        wait="j.run_at",
        pending="j.locked_at IS NULL AND j.attempts < j.max_attempts",
        stuck="j.locked_at < :cutoff",
        dead="j.attempts >= j.max_attempts AND j.locked_at IS NULL",
        queue="j.job_queue_id = (SELECT id FROM graphile_worker._private_job_queues"
        " WHERE queue_name = :q)",
        error="j.last_error",
        died="j.updated_at",
        running="j.locked_at IS NOT NULL",
    ),
    "good_job": Facts(
        src="good_jobs j",
        table="good_jobs",
        state=GOOD_JOB_STATE,
        kind="j.job_class",
        wait="timezone('UTC', coalesce(j.scheduled_at, j.created_at))",
        pending="j.finished_at IS NULL AND j.performed_at IS NULL",
        stuck="j.finished_at IS NULL AND j.performed_at IS NOT NULL"
        " AND timezone('UTC', j.performed_at) < :cutoff",
        dead="j.finished_at IS NOT NULL AND j.error IS NOT NULL",
        queue="j.queue_name = :q",
        succeeded="NOT (j.finished_at IS NOT NULL AND j.error IS NULL)",
        error="j.error",
        died="j.finished_at",
    ),
    "solid_queue": Facts(
        src="solid_queue_jobs j"
        " LEFT JOIN solid_queue_failed_executions f ON f.job_id = j.id"
        " LEFT JOIN solid_queue_claimed_executions c ON c.job_id = j.id"
        " LEFT JOIN solid_queue_ready_executions r ON r.job_id = j.id"
        " LEFT JOIN solid_queue_scheduled_executions s ON s.job_id = j.id"
        " LEFT JOIN solid_queue_blocked_executions b ON b.job_id = j.id",
        table="solid_queue_jobs",
        state=SOLID_QUEUE_STATE,
        kind="j.class_name",
        wait="timezone('UTC', coalesce(j.scheduled_at, j.created_at))",
        pending="f.job_id IS NULL AND c.job_id IS NULL"
        " AND (r.job_id IS NOT NULL OR s.job_id IS NOT NULL OR b.job_id IS NOT NULL)",
        stuck="f.job_id IS NULL AND timezone('UTC', c.created_at) < :cutoff",
        dead="f.job_id IS NOT NULL",
        queue="j.queue_name = :q",
        succeeded="j.finished_at IS NULL",
        error="concat_ws(': ', f.error::jsonb->>'exception_class', f.error::jsonb->>'message')",
        died="f.created_at",
        error_src="solid_queue_failed_executions f JOIN solid_queue_jobs j ON j.id = f.job_id",
    ),
    "que": Facts(
        src="que_jobs j",
        table="que_jobs",
        state=QUE_STATE,
        kind="j.job_class",
        wait="j.run_at",
        pending="j.expired_at IS NULL AND j.finished_at IS NULL",
        stuck="false",  # Que marks no running job in its table
        dead="j.expired_at IS NOT NULL",
        queue="j.queue = :q",
        error="j.last_error_message",
        died="j.expired_at",
        running="false",
    ),
}


def _rows(table: str) -> str:
    """The planner's estimate of a table's rows (its partitions' summed: pg-boss's), as
    triage scales it to the table's pages."""
    return (
        "(SELECT sum(CASE WHEN relpages > 0 THEN reltuples / relpages * (pg_relation_size(oid)"
        " / current_setting('block_size')::float8) ELSE 0 END) FROM pg_class WHERE oid IN"
        f" (SELECT relid FROM pg_partition_tree('{table}') WHERE isleaf))"
    )


def floor_statements(
    preset: str, *, one_queue: bool, shape: str, percent: float = 100.0, seed: int = 0
) -> dict[str, str]:
    """The floor's statements by name, for a triage that ``shape``: ``"estimated"`` (the
    succeeded jobs from the statistics), ``"sampled"`` (the backlog from ``percent`` of
    the table's pages, ``seed`` the sample's) or ``"exact"``."""
    f = FACTS[preset]
    scope = f" AND {f.queue}" if one_queue else ""
    keep = "true"
    out: dict[str, str] = {}
    if shape == "estimated" and f.succeeded is not None:
        keep = f.succeeded
        out["estimate"] = f"SELECT {_rows(f.table)}"
    if shape == "sampled":
        keep = f"{f.dead} OR {f.running}"  # counted whole; the others from the sample
        sample = f"{f.table} j TABLESAMPLE SYSTEM ({percent!r}) REPEATABLE ({seed}){f.joins}"
        out["sample"] = f"SELECT {f.state}, {f.kind}, count(*) FROM {sample} GROUP BY 1, 2"
        out["sample pages"] = (  # what each count's error is measured from
            "SELECT state, sum(y), sum(y * y) FROM (SELECT (j.ctid::text::point)[0],"
            f" {f.state} AS state, count(*) AS y FROM {sample} GROUP BY 1, 2) AS pages"
            " GROUP BY 1"
        )
        out["oldest"] = f"SELECT min({f.wait}) FROM {f.src} WHERE {f.pending}{scope}"
    out["counts"] = (
        f"SELECT {f.state} AS state, {f.kind} AS kind, count(*),"
        f" min({f.wait}) FILTER (WHERE {f.pending}), count(*) FILTER (WHERE {f.stuck})"
        f" FROM {f.src} WHERE ({keep}){scope} GROUP BY 1, 2"
    )
    if f.error is not None:
        out["errors"] = (
            f"SELECT {f.error} FROM {f.error_src or f.src} WHERE {f.dead}{scope}"
            f" ORDER BY {f.died} DESC NULLS LAST, j.id DESC LIMIT {SIGNATURE_SAMPLE}"
        )
    return out
