"""Three `queuebot serve` replicas on one PostgreSQL database, every delivery sent to all
three at the same moment (and a double click twice to each): every side effect happens
once and every delivery is answered once in total."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.people import SLACK_ALICE, SLACK_BOB
from tests.reliability.harness import (
    EVENTS,
    PLAN_TOML,
    Delivery,
    Figures,
    Serve,
    Worker,
    add_dead_letters,
    answers,
    audit_verify,
    buttons,
    click,
    cluster,
    executions,
    new_tag,
    send,
    slash,
    text_of,
    wait_answer,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REPLICAS = 3
NAMED_REQUESTS = 5
JOBS_PER_NAMED = 40  # named on the command line: 40 ids fit Slack's text comfortably
PLAN_JOBS = 60  # a sample of 5, then 5 and 10s: 7 waves


class Fanout:
    """Sends each delivery to every replica at once, and remembers what it sent."""

    def __init__(self, replicas: list[Serve]) -> None:
        self.replicas = replicas
        self.sent: list[tuple[Delivery, int]] = []
        self.pool = ThreadPoolExecutor(max_workers=4 * len(replicas))

    def __call__(self, d: Delivery, *, each: int = 1) -> None:
        copies = [r for r in self.replicas for _ in range(each)]
        gate = threading.Barrier(len(copies))

        def deliver(replica: Serve) -> int:
            gate.wait(timeout=10)
            return send(replica.url, d).status_code

        assert list(self.pool.map(deliver, copies)) == [200] * len(copies)
        self.sent.append((d, len(copies)))


def ignored_copies(replicas: list[Serve], d: Delivery) -> int:
    line = f"repeated delivery {d.key}: acted on or in hand already, ignored"
    return sum(r.log.read_text().count(line) for r in replicas)


def test_three_replicas_act_once_on_every_delivery(tmp_path: Path, figures: Figures) -> None:
    started = time.monotonic()
    with cluster(tmp_path, toml=PLAN_TOML) as c:
        named = add_dead_letters(c, count=NAMED_REQUESTS * JOBS_PER_NAMED, error="replica oom")
        plan_jobs = add_dead_letters(c, count=PLAN_JOBS, error="replica pod evicted")
        replicas = c.start_many(REPLICAS)
        everywhere = Fanout(replicas)

        for _ in range(3):  # reads
            everywhere(
                slash(c.fake, "triage --queue clips", user=SLACK_ALICE, tag=new_tag("r-read"))
            )
        requests: list[int] = []
        for g in range(NAMED_REQUESTS):
            ids = named[g * JOBS_PER_NAMED : (g + 1) * JOBS_PER_NAMED]
            ask = slash(
                c.fake,
                f'redrive {" ".join(ids)} --queue clips --reason "rel-r-{g}"',
                user=SLACK_ALICE,
                tag=new_tag("r-ask"),
            )
            everywhere(ask)
            approve, _ = buttons(wait_answer(c.fake, ask))
            requests.append(int(approve.split(":")[2]))
            everywhere(click(c.fake, approve, user=SLACK_ALICE, tag=new_tag("r-own")))  # refused
            ok = click(c.fake, approve, user=SLACK_BOB, tag=new_tag("r-ok"))
            everywhere(ok, each=2)  # Bob's double click reaches each replica twice
            assert "approved by bob and executed" in text_of(wait_answer(c.fake, ok))

        ask = slash(
            c.fake,
            'redrive --error-like "replica pod evicted" --queue clips --sample 5 '
            '--reason "rel-r-plan"',
            user=SLACK_ALICE,
            tag=new_tag("r-plan"),
        )
        everywhere(ask)
        approve, _ = buttons(wait_answer(c.fake, ask))
        plan_request = int(approve.split(":")[2])
        ok = click(c.fake, approve, user=SLACK_BOB, tag=new_tag("r-plan-ok"))
        with Worker(c):
            everywhere(ok)
            deadline = time.monotonic() + 90
            while (
                c.scalar(
                    "SELECT count(*) FROM qb_plans WHERE request_id = %s AND state = 'completed'",
                    (plan_request,),
                )
                != 1
            ):
                assert time.monotonic() < deadline, "the plan did not complete"
                time.sleep(0.1)
        while c.scalar("SELECT count(*) FROM qb_outbox WHERE done_at IS NULL"):
            assert time.monotonic() < deadline + 30, "the outbox never drained"
            time.sleep(0.1)
        time.sleep(1.0)  # a second answer, if any replica were to send one, has arrived

        # every delivery answered once in total, the other copies ignored by the ledger
        for d, copies in everywhere.sent:
            assert len(answers(c.fake, d)) == 1, d.answer
            assert ignored_copies(replicas, d) == copies - 1, d.answer
        # one request per command, one execution per request, one event per job
        for g, number in enumerate(requests):
            assert c.sql(
                "SELECT id FROM qb_change_requests WHERE reason = %s", (f"rel-r-{g}",)
            ) == [(number,)]
            assert executions(c, number) == 1
        per_job = dict(
            c.sql(
                "SELECT CAST(aggregate_id AS text), count(*) FROM job_events WHERE "
                "event_type = 'REDRIVE_REQUESTED' AND aggregate_id = ANY(CAST(%s AS uuid[])) "
                "GROUP BY aggregate_id",
                (named + plan_jobs,),
            )
        )
        assert per_job == dict.fromkeys(named + plan_jobs, 1)
        assert executions(c, plan_request) == 1
        (plan,) = c.sql("SELECT id, waves FROM qb_plans WHERE request_id = %s", (plan_request,))
        number, waves = plan[0], plan[1]["waves"]
        posts = c.fake.recorded("/api/chat.postMessage")
        heads = [
            p
            for p in posts
            if p.body.get("thread_ts") is None
            and str(p.body.get("text", "")).startswith(f"P-{number}: redrive")
        ]
        assert len(heads) == 1  # one plan message
        news = [str(p.body["text"]) for p in posts if p.body.get("thread_ts")]
        for wave in waves:
            label = "sample" if wave["number"] == 0 else f"wave {wave['number']}"
            for what in ("started", "finished"):
                said = [t for t in news if t.startswith(f"P-{number} {label} {what}:")]
                assert len(said) == 1, (label, what, said)  # no crash here: exactly once
        assert all(r.proc.poll() is None for r in replicas)  # all three ran throughout
        acted = {
            r.name: sum(
                r.log.read_text().count(f"repeated delivery {d.key}:") < copies_on(d, everywhere)
                for d, _ in everywhere.sent
            )
            for r in replicas
        }
        facts = {
            "replicas": REPLICAS,
            "deliveries": len(everywhere.sent),
            "copies sent": sum(copies for _, copies in everywhere.sent),
            "answers": sum(len(answers(c.fake, d)) for d, _ in everywhere.sent),
            "copies ignored by the ledger": sum(
                ignored_copies(replicas, d) for d, _ in everywhere.sent
            ),
            "deliveries each replica acted on": acted,
            "change requests": len(requests) + 1,
            "executions": sum(executions(c, n) for n in [*requests, plan_request]),
            "REDRIVE_REQUESTED events": c.scalar(EVENTS, (named + plan_jobs,)),
            "jobs": len(named) + len(plan_jobs),
            "plan waves": len(waves),
            "plan messages": len(heads),
            "wave news posts": len(news),
            "audit verify": audit_verify(c),
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("three replicas", facts)
    assert stored["answers"] == stored["deliveries"]
    assert stored["copies ignored by the ledger"] == stored["copies sent"] - stored["deliveries"]
    assert stored["executions"] == stored["change requests"]
    assert stored["REDRIVE_REQUESTED events"] == stored["jobs"]
    assert stored["plan messages"] == 1
    assert stored["wave news posts"] == 2 * stored["plan waves"]


def copies_on(d: Delivery, fanout: Fanout) -> int:
    """How many copies of ``d`` one replica was sent."""
    return next(copies for sent, copies in fanout.sent if sent is d) // len(fanout.replicas)
