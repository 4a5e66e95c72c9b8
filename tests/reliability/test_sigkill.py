"""SIGKILL at random points, 8 times per scenario in the default run (20 in CI's soak:
``QUEUEBOT_SIGKILL_KILLS``), against real `queuebot serve` processes on PostgreSQL: a
change request being created, a request of 300 jobs being approved, and a staged plan
whose waves are being ticked. After each kill serve starts again and nothing is sent
again (Slack never resends what it saw acknowledged): the restarted serve must finish
the work, once, and answer the person within 30 s. Only then does the same delivery (the
same body, so the same ledger key) come again, as Slack's retry or the person's second
click would bring it, and it must be ignored.

The kill delays come from a seeded random, over "from the ack to well after the answer":
``HORIZON`` times the ack-to-answer time of the same delivery on a fresh, undisturbed
serve, measured first. Where each kill landed is read from the ledger and the fake
Slack, and written down with the rest of the figures.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from services.outbox import LEASE
from tests.helpers.people import SLACK_ALICE, SLACK_BOB
from tests.reliability.harness import (
    EVENTS,
    PHASES,
    PLAN_TOML,
    Cluster,
    Delivery,
    Figures,
    Kill,
    Serve,
    Worker,
    add_dead_letters,
    answers,
    audit_verify,
    buttons,
    click,
    cluster,
    executions,
    kill_and_finish,
    kill_summary,
    new_tag,
    request_redrives,
    send,
    slash,
    text_of,
    wait_answer,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _kills() -> int:
    """Kills per scenario: each one restarts serve and its worker, two fresh interpreters
    (about 4 s of CPU and the claim's staleness to wait out), so the default run kills 8
    times and `.ci/run` runs the three scenarios again at 20 (``QUEUEBOT_SIGKILL_KILLS``)."""
    text = os.environ.get("QUEUEBOT_SIGKILL_KILLS", "8")
    if not text.isdigit() or not 2 <= int(text) <= 50:
        raise pytest.UsageError(f"QUEUEBOT_SIGKILL_KILLS must be a whole number 2-50, not {text!r}")
    return int(text)


KILLS = _kills()
HORIZON = 3.0  # kill delays: uniform over [0, HORIZON x the measured ack-to-answer time]
SEED = 20261130


def calibrate(c: Cluster, served: Serve, d: Delivery) -> float:
    """Seconds from the ack to the answer of ``d`` on this serve, undisturbed."""
    response = send(served.url, d)
    acked = time.monotonic()
    assert response.status_code == 200
    return wait_answer(c.fake, d).at - acked


# -- (a) creating a change request --------------------------------------------------------

QUEUE_ROWS = (  # the queue rows a request names, as they are: asking must change none
    "SELECT 'workers', CAST(id AS text), status FROM dev_r_worker_queue UNION ALL "
    "SELECT 'clips', CAST(job_id AS text), status FROM queue_messages ORDER BY 1, 2"
)


def test_request_creation_survives_sigkill(tmp_path: Path, figures: Figures) -> None:
    rng = random.Random(SEED)
    started = time.monotonic()
    with cluster(tmp_path) as c:
        failed = [r[0] for r in c.sql("SELECT id FROM dev_r_worker_queue WHERE status = 'failed'")]
        assert failed

        def command(reason: str, plan: bool) -> str:
            if plan:
                return f'redrive --error-like ffmpeg --queue clips --reason "{reason}"'
            return f'requeue {" ".join(map(str, failed))} --queue workers --reason "{reason}"'

        rows_before = c.sql(QUEUE_ROWS)
        measured: dict[bool, float] = {}
        for plan in (True, False):  # each on a serve of its own, as every kill finds one
            served = c.start()
            cal = slash(
                c.fake, command(f"calibrate {plan}", plan), user=SLACK_ALICE, tag=new_tag("a")
            )
            measured[plan] = calibrate(c, served, cal)
            if plan:
                served.stop()
        sent: list[tuple[str, bool, Delivery]] = []
        kills: list[Kill] = []
        for i in range(KILLS):
            plan = i % 2 == 0
            reason = f"rel-a-{i:02d}"
            d = slash(c.fake, command(reason, plan), user=SLACK_ALICE, tag=new_tag(f"a{i:02d}"))
            sent.append((reason, plan, d))

            def requested_with_its_delivery(reason: str = reason, d: Delivery = d) -> None:
                # the request, its audit event and "delivery done" commit together or not
                rows = c.sql(
                    "SELECT r.id, (SELECT count(*) FROM qb_audit_events a WHERE "
                    "a.action = 'change.requested' AND a.subject = 'CR-' || r.id) "
                    "FROM qb_change_requests r WHERE r.reason = %s",
                    (reason,),
                )
                assert len(rows) <= 1
                assert all(events == 1 for _, events in rows)
                assert (c.ledger_state(d) == "done") == (len(rows) == 1)

            served, kill = kill_and_finish(
                c,
                served,
                d,
                delay=rng.uniform(0, HORIZON * measured[plan]),
                at_kill=requested_with_its_delivery,
                retry=True,
            )
            kills.append(kill)

        unanswered = 0
        per_command: list[int] = []
        for (reason, plan, d), kill in zip(sent, kills, strict=True):
            rows = c.sql(
                "SELECT id, kind, state FROM qb_change_requests WHERE reason = %s", (reason,)
            )
            per_command.append(len(rows))
            assert len(rows) == 1, (reason, rows)  # exactly one request per slash command
            number, kind, state = rows[0]
            assert (kind, state) == ("plan" if plan else "requeue", "pending")
            assert c.ledger_state(d) == "done"
            got = answers(c.fake, d)
            unanswered += not got
            if kill.phase == PHASES[1]:
                # committed, then killed before the answer went out: the restarted serve
                # says what was done, and that it was done once
                assert len(got) == 1, (reason, kill)
                assert "Done before a restart" in text_of(got[0])
                assert f"CR-{number} requested" in text_of(got[0])
            elif kill.phase == PHASES[2]:
                # answered, killed before the ledger said so: said again, never lost
                assert 1 <= len(got) <= 2 and f"CR-{number}" in text_of(got[0]), (reason, kill)
            else:
                assert len(got) == 1 and f"CR-{number}" in text_of(got[0]), (reason, kill)
        requested = c.scalar(
            "SELECT count(*) FROM qb_audit_events WHERE action = 'change.requested' "
            "AND reason LIKE 'rel-a-%%'"
        )
        executed = c.scalar(
            "SELECT count(*) FROM qb_audit_events WHERE action LIKE 'change.exec%%'"
        )
        verified = audit_verify(c)
        facts = {
            **kill_summary(kills),
            "seed": SEED,
            "ack to answer, fresh serve (s)": {
                "plan request": round(measured[True], 3),
                "requeue request": round(measured[False], 3),
            },
            "requests per slash command (fewest, most)": [min(per_command), max(per_command)],
            "queue rows changed by requesting": rows_before != c.sql(QUEUE_ROWS),
            "change.requested events": requested,
            "executions": executed,
            "deliveries never answered": unanswered,
            "serve processes": len(c.serves),
            "audit verify": verified,
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("sigkill: request creation", facts)
    assert stored["kills"] == KILLS
    assert stored["deliveries never answered"] == 0
    assert stored["redeliveries ignored as done"] == KILLS
    assert stored["requests per slash command (fewest, most)"] == [1, 1]
    assert stored["change.requested events"] == KILLS
    assert stored["executions"] == 0
    assert stored["queue rows changed by requesting"] is False


# -- (b) approving a request of 300 jobs --------------------------------------------------

JOBS_PER_REQUEST = 300
MOVED = (
    "SELECT count(*) FROM queue_messages m JOIN clip_jobs j ON j.id = m.job_id "
    "WHERE m.job_id = ANY(CAST(%s AS uuid[])) AND m.status = 'PENDING' AND j.status = 'QUEUED'"
)
UNTOUCHED = (
    "SELECT count(*) FROM queue_messages m JOIN clip_jobs j ON j.id = m.job_id "
    "WHERE m.job_id = ANY(CAST(%s AS uuid[])) AND m.status = 'DLQ' AND j.status = 'FAILED'"
)


def frozen_targets(c: Cluster, number: int) -> list[str]:
    """The job ids the request froze when it was made (its items)."""
    rows = c.sql("SELECT job_id FROM qb_change_items WHERE request_id = %s ORDER BY seq", (number,))
    return [str(r[0]) for r in rows]


def test_approval_of_300_jobs_survives_sigkill(tmp_path: Path, figures: Figures) -> None:
    rng = random.Random(SEED + 1)
    started = time.monotonic()
    with cluster(tmp_path) as c:
        groups = [
            (f"rel-b-{i:02d}", add_dead_letters(c, count=JOBS_PER_REQUEST, error=f"oom {i:02d}"))
            for i in range(KILLS + 1)  # the last one calibrates
        ]
        events_before = c.scalar(
            "SELECT count(*) FROM job_events WHERE event_type = 'REDRIVE_REQUESTED'"
        )
        dead_before = c.scalar("SELECT count(*) FROM queue_messages WHERE status = 'DLQ'")
        numbers = request_redrives(c, groups)
        for number, (_, jobs) in zip(numbers, groups, strict=True):
            assert sorted(frozen_targets(c, number)) == sorted(jobs)

        served = c.start()
        cal = click(c.fake, f"cr:approve:{numbers[-1]}", user=SLACK_BOB, tag=new_tag("b-cal"))
        measured = calibrate(c, served, cal)

        sent: list[tuple[int, Delivery]] = []
        kills: list[Kill] = []
        for i, number in enumerate(numbers[:KILLS]):
            d = click(c.fake, f"cr:approve:{number}", user=SLACK_BOB, tag=new_tag(f"b{i:02d}"))
            sent.append((number, d))

            def all_or_nothing(number: int = number, d: Delivery = d) -> None:
                jobs = frozen_targets(c, number)
                state = c.scalar("SELECT state FROM qb_change_requests WHERE id = %s", (number,))
                seen = (state, c.scalar(MOVED, (jobs,)), c.scalar(EVENTS, (jobs,)))
                seen += (executions(c, number),)
                assert seen in {
                    ("pending", 0, 0, 0),
                    ("executed", JOBS_PER_REQUEST, JOBS_PER_REQUEST, 1),
                }, seen
                assert (c.ledger_state(d) == "done") == (state == "executed")

            served, kill = kill_and_finish(
                c,
                served,
                d,
                delay=rng.uniform(0, HORIZON * measured),
                at_kill=all_or_nothing,
                retry=False,
            )
            kills.append(kill)

        unanswered = 0
        for (number, d), kill in zip(sent, kills, strict=True):
            jobs = frozen_targets(c, number)
            state, result = c.sql(
                "SELECT state, result FROM qb_change_requests WHERE id = %s", (number,)
            )[0]
            assert state == "executed"
            assert executions(c, number) == 1
            assert len(result["changed"]) == JOBS_PER_REQUEST and result["skipped"] == []
            assert c.scalar(MOVED, (jobs,)) == JOBS_PER_REQUEST
            per_job = dict(
                c.sql(
                    "SELECT CAST(aggregate_id AS text), count(*) FROM job_events WHERE "
                    "event_type = 'REDRIVE_REQUESTED' AND aggregate_id = ANY(CAST(%s AS uuid[]))"
                    " GROUP BY aggregate_id",
                    (jobs,),
                )
            )
            assert per_job == dict.fromkeys(jobs, 1)
            decisions = c.sql(
                "SELECT person, decision FROM qb_approvals WHERE request_id = %s", (number,)
            )
            assert decisions == [("bob", "approve")]
            got = answers(c.fake, d)
            unanswered += not got
            if kill.phase == PHASES[1]:
                assert len(got) == 1, (number, kill)
                assert "Done before a restart" in text_of(got[0])
                assert f"CR-{number} approved and executed" in text_of(got[0])
            else:
                assert len(got) == (len(got) if kill.phase == PHASES[2] else 1), (number, kill)
                assert 1 <= len(got) <= 2, (number, kill)
                assert f"CR-{number}: redrive {JOBS_PER_REQUEST} row(s)" in text_of(got[0])
                assert "approved by bob and executed" in text_of(got[0])
        total = (KILLS + 1) * JOBS_PER_REQUEST
        events = c.scalar("SELECT count(*) FROM job_events WHERE event_type = 'REDRIVE_REQUESTED'")
        dead_after = c.scalar("SELECT count(*) FROM queue_messages WHERE status = 'DLQ'")
        outside = c.scalar(UNTOUCHED, ([j for _, jobs in groups for j in jobs],))
        facts = {
            **kill_summary(kills),
            "seed": SEED + 1,
            "jobs per request": JOBS_PER_REQUEST,
            "ack to answer, fresh serve (s)": round(measured, 3),
            "requests executed": sum(executions(c, n) for n in numbers),
            "REDRIVE_REQUESTED events written": events - events_before,
            "dead letters taken out": dead_before - dead_after,
            "target jobs still dead": outside,
            "deliveries never answered": unanswered,
            "serve processes": len(c.serves),
            "audit verify": audit_verify(c),
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("sigkill: approval of 300 jobs", facts)
    assert stored["kills"] == KILLS
    assert stored["deliveries never answered"] == 0
    assert stored["redeliveries ignored as done"] == KILLS
    assert stored["requests executed"] == KILLS + 1
    assert stored["REDRIVE_REQUESTED events written"] == total  # one per job, nothing more
    assert stored["dead letters taken out"] == total  # and no other row moved
    assert stored["target jobs still dead"] == 0


# -- (c) a staged plan's waves -------------------------------------------------------------

PLAN_JOBS = 150  # a sample of 5, then waves of 5 and 10: 16 waves a plan
PLAN_HORIZON = 2.0  # seconds after serve is up; waves run every few tenths of a second


def start_plan(c: Cluster, served: Serve, error: str, tag: str) -> int:
    """Alice asks for the plan in Slack, Bob approves it with the button: its sample runs
    and the plan's message is posted; the plan's number."""
    asked = slash(
        c.fake,
        f'redrive --error-like "{error}" --queue clips --sample 5 --reason "rel-c {tag}"',
        user=SLACK_ALICE,
        tag=new_tag(f"{tag}-ask"),
    )
    assert send(served.url, asked).status_code == 200
    approve, _ = buttons(wait_answer(c.fake, asked))
    approval = click(c.fake, approve, user=SLACK_BOB, tag=new_tag(f"{tag}-ok"))
    assert send(served.url, approval).status_code == 200
    assert "started with its sample of 5" in text_of(wait_answer(c.fake, approval))
    number = int(
        c.scalar("SELECT id FROM qb_plans WHERE request_id = %s", (int(approve.split(":")[2]),))
    )
    deadline = time.monotonic() + 30
    while c.scalar("SELECT CAST(message_ref AS text) FROM qb_plans WHERE id = %s", (number,)) in (
        None,
        "null",
    ):
        assert time.monotonic() < deadline, "the plan's message was never posted"
        time.sleep(0.05)
    return number


def plan_state(c: Cluster, number: int) -> tuple[str, int]:
    state, waves = c.sql("SELECT state, waves FROM qb_plans WHERE id = %s", (number,))[0]
    return str(state), len(waves["waves"])


def no_half_wave(c: Cluster, number: int) -> None:
    """A wave started is started whole: its jobs redriven, each with one event, and the
    plan's cursor, waves and audit agree; jobs of waves not started are untouched."""
    with c.one_snapshot():
        _no_half_wave(c, number)


def _no_half_wave(c: Cluster, number: int) -> None:
    rows = c.sql(
        "SELECT i.state, count(*), sum((SELECT count(*) FROM job_events e WHERE "
        "e.aggregate_id = CAST(i.job_id AS uuid) AND e.event_type = 'REDRIVE_REQUESTED')), "
        "count(*) FILTER (WHERE m.status = 'DLQ') FROM qb_plan_items i "
        "JOIN queue_messages m ON m.id = CAST(i.message_id AS uuid) "
        "WHERE i.plan_id = %s GROUP BY i.state",
        (number,),
    )
    by_state = {state: (int(n), int(events), int(dead)) for state, n, events, dead in rows}
    for state, (n, events, dead) in by_state.items():
        if state == "waiting":
            assert (events, dead) == (0, n), (number, by_state)
        else:
            assert state in ("redriven", "succeeded") and (events, dead) == (n, 0), by_state
    cursor, waves = c.sql("SELECT cursor, waves FROM qb_plans WHERE id = %s", (number,))[0]
    taken = sum(n for state, (n, _, _) in by_state.items() if state != "waiting")
    assert cursor == taken == sum(w["size"] for w in waves["waves"]), (cursor, taken)
    started = [
        r[0]["wave"]
        for r in c.sql(
            "SELECT CAST(details AS json) FROM qb_audit_events WHERE action = 'plan.wave_started'"
            " AND subject = %s ORDER BY id",
            (f"P-{number}",),
        )
    ]
    assert started == list(range(len(waves["waves"]))), started


SLOWEST_POST = "SELECT max(extract(epoch FROM done_at - created_at)) FROM qb_outbox"


def outbox_undone(c: Cluster) -> int:
    return int(c.scalar("SELECT count(*) FROM qb_outbox WHERE done_at IS NULL"))


def test_plan_waves_survive_sigkill(tmp_path: Path, figures: Figures) -> None:
    rng = random.Random(SEED + 2)
    started = time.monotonic()
    with cluster(tmp_path, toml=PLAN_TOML) as c:
        errors = [f"transcoder pod evicted, batch {k}" for k in range(6)]
        jobs = {e: add_dead_letters(c, count=PLAN_JOBS, error=e) for e in errors}
        served = c.start()
        plans: list[int] = []
        kills: list[dict[str, object]] = []
        held: set[int] = set()
        with Worker(c) as worker:
            for i in range(KILLS):
                if not plans or plan_state(c, plans[-1])[0] == "completed":
                    assert len(plans) < len(errors), "more plans than dead letters for them"
                    plans.append(start_plan(c, served, errors[len(plans)], f"c{i:02d}"))
                delay = rng.uniform(0, PLAN_HORIZON)
                time.sleep(delay)
                served.kill()
                state, waves = plan_state(c, plans[-1])
                # a post the dead relay was delivering: it waits out its lease
                held.update(
                    r[0]
                    for r in c.sql(
                        "SELECT id FROM qb_outbox WHERE done_at IS NULL AND due_at > now() "
                        "AND last_error IS NULL"
                    )
                )
                for number in plans:
                    no_half_wave(c, number)
                kills.append({"delay": round(delay, 3), "plan": state, "waves": waves})
                served = c.start()
            deadline = time.monotonic() + 120
            while plan_state(c, plans[-1])[0] != "completed":
                assert time.monotonic() < deadline, plan_state(c, plans[-1])
                time.sleep(0.1)
        finished = time.monotonic()
        while outbox_undone(c):  # an item a killed relay held comes due when its lease ends
            lease = LEASE.total_seconds()
            assert time.monotonic() < finished + lease + 30, "the outbox never drained"
            time.sleep(0.2)
        drained_after = time.monotonic() - finished

        posts = c.fake.recorded("/api/chat.postMessage")
        news_posted = news_twice = 0
        for number, error in zip(plans, errors, strict=False):
            no_half_wave(c, number)
            assert plan_state(c, number)[0] == "completed"
            states = dict(
                c.sql(
                    "SELECT state, count(*) FROM qb_plan_items WHERE plan_id = %s GROUP BY state",
                    (number,),
                )
            )
            assert states == {"succeeded": PLAN_JOBS}
            assert c.scalar(EVENTS, (jobs[error],)) == PLAN_JOBS  # one per job: none twice
            heads = [
                p
                for p in posts
                if p.body.get("thread_ts") is None
                and str(p.body.get("text", "")).startswith(f"P-{number}: redrive")
            ]
            assert len(heads) == 1, heads  # one plan message
            waves = c.sql("SELECT waves FROM qb_plans WHERE id = %s", (number,))[0][0]["waves"]
            for wave in waves:
                label = "sample" if wave["number"] == 0 else f"wave {wave['number']}"
                for news in (f"P-{number} {label} started:", f"P-{number} {label} finished:"):
                    seen = [
                        p
                        for p in posts
                        if p.body.get("thread_ts") and str(p.body["text"]).startswith(news)
                    ]
                    assert seen, f"the fake Slack never got {news!r}"
                    news_posted += 1
                    news_twice += len(seen) > 1
        facts = {
            "kills": len(kills),
            "seed": SEED + 2,
            "kills while a plan was running": sum(k["plan"] == "running" for k in kills),
            "posts a killed relay was delivering (each waited out its lease)": len(held),
            "slowest post, written to delivered (s)": round(float(c.scalar(SLOWEST_POST)), 1),
            "plans": len(plans),
            "jobs per plan": PLAN_JOBS,
            "waves": sum(plan_state(c, n)[1] for n in plans),
            "jobs the worker completed (the demo's pending ones too)": worker.completed,
            "wave news expected": news_posted,
            "wave news delivered more than once": news_twice,
            "outbox undone at the end": outbox_undone(c),
            "seconds the outbox took to drain after the last plan": round(drained_after, 1),
            "serve processes": len(c.serves),
            "audit verify": audit_verify(c),
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("sigkill: plan waves", facts)
    assert stored["kills"] == KILLS
    assert stored["outbox undone at the end"] == 0
    assert stored["kills while a plan was running"] >= KILLS // 2
    assert stored["wave news expected"] == 2 * stored["waves"]
