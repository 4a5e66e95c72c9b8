"""Each real queue system makes real dead jobs in a fresh database, and runs them to success
once they are retried the way the system itself retries them and the fault is gone.

Where a system deletes a job that succeeds (graphile-worker, Que), its success state is
None: the row is gone.

Skipped where a system cannot run here (pg-boss, graphile-worker without node and npm), unless
``QUEUEBOT_REQUIRE_SYSTEMS=1`` (CI), where that fails.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from testkit.systems import all_systems, systems_available
from tests.helpers.systems import real_system

QUEUES = {"emails": (3, 5), "reports": (2, 2)}
# (dead state, success state) as each system writes them; None: the row is deleted
STATES: dict[str, tuple[str, str | None]] = {
    "procrastinate": ("failed", "succeeded"),
    "pg-boss": ("failed", "completed"),
    "river": ("discarded", "completed"),
    "oban": ("discarded", "completed"),
    "graphile-worker": ("dead", None),
    "good_job": ("discarded", "succeeded"),
    "solid_queue": ("failed", "finished"),
    "que": ("expired", None),
}


def _retry_procrastinate(conn: psycopg.Connection, ids: list[str]) -> None:
    # Its own SQL function: status todo, one more attempt, scheduled now.
    for i in ids:
        conn.execute("SELECT procrastinate_retry_job_v2(%s, now(), NULL, NULL, NULL)", (int(i),))


def _retry_pgboss(conn: psycopg.Connection, ids: list[str]) -> None:
    # failed -> retry, one more retry allowed, not finished, not due in the past.
    conn.execute(
        "UPDATE pgboss.job SET state = 'retry', retry_limit = retry_limit + 1,"
        " completed_on = NULL, start_after = greatest(start_after, now())"
        " WHERE id = ANY(%s::uuid[]) AND state = 'failed'",
        (ids,),
    )


def _retry_river(conn: psycopg.Connection, ids: list[str]) -> None:
    # available now, one more attempt where none is left, not finalized; never running.
    conn.execute(
        "UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = now(),"
        " max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1"
        " ELSE max_attempts END"
        " WHERE id = ANY(%s) AND state <> 'running'",
        ([int(i) for i in ids],),
    )


def _retry_oban(conn: psycopg.Connection, ids: list[str]) -> None:
    conn.execute(
        "UPDATE oban_jobs SET state = 'available',"
        " max_attempts = greatest(max_attempts, attempt + 1),"
        " scheduled_at = timezone('UTC', now()),"
        " completed_at = NULL, cancelled_at = NULL, discarded_at = NULL"
        " WHERE id = ANY(%s) AND state <> 'executing'",
        ([int(i) for i in ids],),
    )


def _retry_graphile(conn: psycopg.Connection, ids: list[str]) -> None:
    # Its own SQL function (it skips locked jobs): due now, one more attempt.
    for i in ids:
        done = conn.execute(
            "SELECT id FROM graphile_worker.reschedule_jobs(ARRAY[%s]::bigint[], now(), NULL,"
            " NULL, (SELECT attempts + 1 FROM graphile_worker.jobs WHERE id = %s))",
            (int(i), int(i)),
        ).fetchall()
        assert len(done) == 1


def _retry_good_job(conn: psycopg.Connection, ids: list[str]) -> None:
    # The same row again: not performed, not finished, due now, its error event "retried".
    conn.execute(
        "UPDATE good_jobs SET performed_at = NULL, finished_at = NULL,"
        " scheduled_at = timezone('UTC', now()), error_event = 3,"
        " updated_at = timezone('UTC', now())"
        " WHERE id = ANY(%s::uuid[]) AND finished_at IS NOT NULL AND error IS NOT NULL",
        (ids,),
    )


def _retry_solid_queue(conn: psycopg.Connection, ids: list[str]) -> None:
    # In one transaction: the job ready again, its failed execution gone.
    with conn.transaction():
        conn.execute(
            "INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority, created_at)"
            " SELECT j.id, j.queue_name, j.priority, timezone('UTC', now())"
            " FROM solid_queue_jobs j JOIN solid_queue_failed_executions f ON f.job_id = j.id"
            " WHERE j.id = ANY(%s)",
            ([int(i) for i in ids],),
        )
        conn.execute(
            "DELETE FROM solid_queue_failed_executions WHERE job_id = ANY(%s)",
            ([int(i) for i in ids],),
        )


def _retry_que(conn: psycopg.Connection, ids: list[str]) -> None:
    conn.execute(
        "UPDATE que_jobs SET expired_at = NULL, error_count = 0, run_at = now()"
        " WHERE id = ANY(%s) AND expired_at IS NOT NULL",
        ([int(i) for i in ids],),
    )


RETRY: dict[str, Callable[[psycopg.Connection, list[str]], None]] = {
    "procrastinate": _retry_procrastinate,
    "pg-boss": _retry_pgboss,
    "river": _retry_river,
    "oban": _retry_oban,
    "graphile-worker": _retry_graphile,
    "good_job": _retry_good_job,
    "solid_queue": _retry_solid_queue,
    "que": _retry_que,
}

# What a person looking at a dead job sees: the attempts it had and the error it left.
DEAD_DETAIL = {
    "procrastinate": (
        # its state changes; "scheduled" events come once or more (any update of a todo
        # job with scheduled_at set writes one, also the worker's row being cleared)
        "SELECT j.attempts, (SELECT array_agg(e.type::text ORDER BY e.id)"
        " FROM procrastinate_events e WHERE e.job_id = j.id AND e.type <> 'scheduled')"
        " FROM procrastinate_jobs j WHERE j.id = %s::bigint"
    ),
    "pg-boss": ("SELECT retry_count + 1, output->>'message' FROM pgboss.job WHERE id = %s::uuid"),
    "river": (
        "SELECT attempt, errors[array_length(errors, 1)]->>'error' FROM river_job"
        " WHERE id = %s::bigint AND finalized_at IS NOT NULL AND array_length(errors, 1) = 2"
    ),
    "oban": (
        "SELECT attempt, errors[array_length(errors, 1)]->>'error' FROM oban_jobs"
        " WHERE id = %s::bigint AND discarded_at IS NOT NULL AND array_length(errors, 1) = 2"
    ),
    "graphile-worker": (
        "SELECT attempts, last_error FROM graphile_worker.jobs"
        " WHERE id = %s::bigint AND attempts >= max_attempts AND locked_at IS NULL"
    ),
    # one execution row per run, each with its error
    "good_job": (
        "SELECT j.executions_count, j.error FROM good_jobs j"
        " WHERE j.id = %s::uuid AND j.finished_at IS NOT NULL AND (SELECT count(*)"
        " FROM good_job_executions e WHERE e.active_job_id = j.active_job_id"
        " AND e.error IS NOT NULL) = 2"
    ),
    # ActiveJob's retry made a second row of the same job: two rows, the last one failed
    "solid_queue": (
        "SELECT (SELECT count(*) FROM solid_queue_jobs o WHERE o.active_job_id ="
        " j.active_job_id), f.error::jsonb->>'message'"
        " FROM solid_queue_jobs j JOIN solid_queue_failed_executions f ON f.job_id = j.id"
        " WHERE j.id = %s::bigint AND f.error::jsonb->>'exception_class' = 'Timeout::Error'"
    ),
    # the last attempt's error is not written: the message is the first attempt's
    "que": (
        "SELECT error_count, last_error_message FROM que_jobs"
        " WHERE id = %s::bigint AND expired_at IS NOT NULL"
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("name", sorted(STATES))
def test_dead_jobs_run_again_once_retried_and_fixed(name: str, libpq_url: str) -> None:
    system = real_system(name)
    dead_state, ok_state = STATES[name]

    made = system.build(libpq_url, queues=QUEUES)

    assert {q: len(ids) for q, ids in made.dead.items()} == {"emails": 5, "reports": 2}
    assert {q: len(ids) for q, ids in made.ok.items()} == {"emails": 3, "reports": 2}
    dead = [i for ids in made.dead.values() for i in ids]
    ok = [i for ids in made.ok.values() for i in ids]
    assert set(system.state_of(libpq_url, dead).values()) == {dead_state}
    assert set(system.state_of(libpq_url, ok).values()) <= {ok_state, None}
    with psycopg.connect(libpq_url) as conn:
        attempts, left = conn.execute(DEAD_DETAIL[name], (dead[0],)).fetchone() or (0, None)
    assert attempts == 2
    if name == "procrastinate":  # no error text in its database: its events tell the story
        assert left == [
            "deferred",
            "started",
            "deferred_for_retry",
            "started",
            "failed",
        ]
    else:
        assert "smtp relay did not answer" in str(left)

    with psycopg.connect(libpq_url, autocommit=True) as conn:
        RETRY[name](conn, dead)
    system.work(libpq_url, fault=False, timeout=30)

    assert set(system.state_of(libpq_url, dead).values()) == {ok_state}
    assert set(system.state_of(libpq_url, ok).values()) <= {ok_state, None}


def test_every_system_is_known_with_why_it_cannot_run() -> None:
    why = systems_available()
    assert set(why) == set(STATES) == {s.name for s in all_systems()}
    assert all(reason is None or reason.strip() for reason in why.values())
