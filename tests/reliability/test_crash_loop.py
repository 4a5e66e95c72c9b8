"""A command that kills the process carrying it out must not kill every replica, forever.

An acknowledged slash command is written down before its ack, and a process that dies
while carrying it out leaves it to the next live `serve`, which adopts it and runs it
again. A command that itself kills its process (one that runs it out of memory) would so
be adopted and run again without end, each time taking a replica down with it. Here the
poison is a `/queue dlq` read held on a table lock the test keeps, so that it never
finishes, and `serve` is SIGKILLed (as the kernel's OOM killer would) once when it took
the command, and once each time a fresh `serve` logs that it adopted it and is running
it again. After three adoptions the next `serve` must not run it: it answers the person
at the response_url that the command failed while being carried out and was not retried,
naming the command and its delivery key, logs why at error level, counts it in
`/metrics`, and no process adopts it again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testkit import web
from tests.conftest import _pg_conninfo
from tests.helpers.people import SLACK_ALICE
from tests.reliability.harness import (
    STALE_SECONDS,
    Cluster,
    Figures,
    answers,
    cluster,
    new_tag,
    send,
    slash,
    text_of,
    wait_answer,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

COMMAND = "dlq --queue workers --limit 5"  # reads dev_r_worker_queue, which the test locks
ADOPTIONS = 3  # times a command that killed its process is run again by another
GIVEN_UP = 'queuebot_deliveries_given_up_total{platform="slack"}'


@contextlib.contextmanager
def held(c: Cluster, table: str) -> Iterator[None]:
    """An ACCESS EXCLUSIVE lock on ``table`` for the block: every read of it waits, so a
    command reading it is still being carried out whenever its process is killed."""
    with psycopg.connect(_pg_conninfo(c.db_url)) as conn:
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


def wait_waiting(c: Cluster, *, seen: frozenset[int], timeout: float = 20) -> frozenset[int]:
    """Until a backend not in ``seen`` waits for a lock (the command, held on the table,
    run by a serve that was not there before); every backend waiting now. A killed
    serve's backend waits on until its lock timeout ends the wait, so the new one is told
    apart by its pid, not by a count."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = frozenset(
            int(pid)
            for (pid,) in c.sql(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        if waiting - seen:
            return waiting | seen
        assert time.monotonic() < deadline, "the command never reached the locked table"
        time.sleep(0.05)


def metric(url: str, series: str) -> float:
    for line in web.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"/metrics has no {series}")


def test_a_command_that_kills_its_process_is_given_up_after_three_adoptions(
    tmp_path: Path, figures: Figures
) -> None:
    started = time.monotonic()
    with cluster(tmp_path) as c:
        served = c.start()
        d = slash(c.fake, COMMAND, user=SLACK_ALICE, tag=new_tag("poison"))
        kills = 0
        stale_waits: list[float] = []
        with held(c, "dev_r_worker_queue"):
            assert send(served.url, d).status_code == 200
            assert c.ledger_state(d) == "claimed"  # written down before the ack
            waiting = wait_waiting(c, seen=frozenset())  # the command is under way, held
            served.kill()
            kills += 1
            for _ in range(ADOPTIONS):
                stale_waits.append(c.wait_claim_stale(d))
                served = c.start()
                served.wait_for_log(f"finishing {d.key}", timeout=30)  # adopted
                waiting = wait_waiting(c, seen=waiting)  # running it again, held
                assert answers(c.fake, d) == [], f"{served.name} answered {d.key}"
                served.kill()  # the command kills its process again
                kills += 1
            stale_waits.append(c.wait_claim_stale(d))
            restarted = time.monotonic()
            last = c.start()
            # still held: a serve that ran the command again would never answer
            answered = wait_answer(c.fake, d, timeout=30)
            took = time.monotonic() - restarted
        text = text_of(answered)
        assert "this command failed while being carried out; it was not retried" in text, text
        assert f"/queue {COMMAND}" in text, text
        assert d.key in text, text
        assert f"started {kills} times" in text, text
        last.wait_for_log(
            f"gave up {d.key}, '/queue {COMMAND}': its process died {kills} times while "
            "carrying it out"
        )
        error_lines = [
            line
            for line in last.log.read_text().splitlines()
            if f"gave up {d.key}" in line and "ERROR" in line
        ]
        assert len(error_lines) == 1, last.log.read_text()[-3000:]
        assert metric(last.url, GIVEN_UP) == 1

        # nobody adopts it again: not the serve that gave it up, nor a fresh one
        after = c.start()
        time.sleep(STALE_SECONDS + 3)  # a stale claim, and a sweep of each serve after it
        state, answered_at, adoptions = c.sql(
            "SELECT state, answered_at, adoptions FROM qb_deliveries WHERE key = %s", (d.key,)
        )[0]
        assert (state, answered_at is not None) == ("done", True)
        assert last.log.read_text().count(d.key) == 1  # the one line that gave it up
        assert d.key not in after.log.read_text()
        assert len(answers(c.fake, d)) == 1
        assert metric(after.url, GIVEN_UP) == 0
        facts = {
            "kills survived": kills,
            "adoptions (the last one gave up)": adoptions,
            "serve processes": len(c.serves),
            "claim staleness waited out (s)": [round(w, 1) for w in stale_waits],
            "restart to the given-up answer (s)": round(took, 2),
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("crash loop: a command that kills its process", facts)
    assert stored["kills survived"] == ADOPTIONS + 1
    assert stored["adoptions (the last one gave up)"] == ADOPTIONS + 1
