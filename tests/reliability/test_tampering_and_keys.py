"""An unlucky operator and an attacker against a running `queuebot serve` on PostgreSQL,
its audit trail keyed: a process given the wrong QUEUEBOT_AUDIT_KEY refuses before it
changes anything (serve and housekeep alike), and rewriting the incident tables or a
change request's reason behind queuebot's back is named by `queuebot audit verify`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from testkit.slack_requests import slash_fields
from tests.helpers import launch
from tests.helpers.people import SLACK_ALICE, SLACK_DORA
from tests.integration.test_incident_timers import drill_runbook
from tests.reliability.harness import (
    AUDIT_KEY,
    Cluster,
    Delivery,
    Figures,
    cluster,
    new_tag,
    send,
    slash,
    text_of,
    wait_answer,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DRILL = "gd:drill-tamper"
WRONG_KEY = "another-key-entirely-5b9e1c0d7a3f2468"


def run(c: Cluster, *args: str, key: str = AUDIT_KEY) -> subprocess.CompletedProcess[str]:
    return launch.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=c.workdir,
        env={**c.process_env, "QUEUEBOT_AUDIT_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def verify(c: Cluster) -> tuple[int, str]:
    done = run(c, "audit", "verify")
    return done.returncode, done.stdout + done.stderr


def test_wrong_keys_change_nothing_and_rewritten_history_is_named(
    tmp_path: Path, figures: Figures
) -> None:
    started = time.monotonic()
    drill_runbook(tmp_path / "runbooks", DRILL, operators_ms=600_000, actors_ms=600_000)
    toml = '\n[runbooks]\ndir = "runbooks"\n'
    with cluster(tmp_path, toml=toml, env={"QUEUEBOT_AUDIT_KEY": AUDIT_KEY}) as c:
        served = c.start()
        tag = new_tag("declare")
        fields = slash_fields(
            c.fake,
            f'declare {DRILL} "jobs stopped finishing" --queue workers',
            name=tag,
            user=SLACK_DORA,
            trigger=f"1.{tag}",
        )
        declare = Delivery(
            urlencode(fields | {"command": "/incident"}), f"slack:command:1.{tag}", tag
        )
        assert send(served.url, declare).status_code == 200
        assert "INC-1" in text_of(wait_answer(c.fake, declare))
        ask = slash(
            c.fake,
            'redrive --error-like ffmpeg --queue clips --reason "codec fixed"',
            user=SLACK_ALICE,
            tag=new_tag("ask"),
        )
        assert send(served.url, ask).status_code == 200
        assert "CR-1" in text_of(wait_answer(c.fake, ask))
        code, said = verify(c)
        assert code == 0, said

        # the wrong key: refused before anything changes, by housekeep and by serve
        events = c.scalar("SELECT count(*) FROM qb_audit_events")
        rows = c.sql("SELECT id, status, retry_count FROM dev_r_worker_queue ORDER BY id")
        housekeep = run(c, "housekeep", key=WRONG_KEY)
        assert housekeep.returncode == 2, housekeep.stdout + housekeep.stderr
        assert "QUEUEBOT_AUDIT_KEY does not match" in housekeep.stderr
        wrong = c.spawn("serve-wrong-key", QUEUEBOT_AUDIT_KEY=WRONG_KEY)
        exits = [housekeep.returncode, wrong.proc.wait(timeout=60)]
        assert exits[1] == 2, wrong.log.read_text()
        assert c.scalar("SELECT count(*) FROM qb_audit_events") == events
        assert c.sql("SELECT id, status, retry_count FROM dev_r_worker_queue ORDER BY id") == rows

        # history rewritten behind queuebot's back: each named, then put back
        named = {}
        for table, rewrite, undo in (
            (
                "qb_incidents",
                "UPDATE qb_incidents SET state = 'resolved', resolved_at = now()",
                "UPDATE qb_incidents SET state = 'open', resolved_at = NULL",
            ),
            (
                "qb_incident_obligations",
                "UPDATE qb_incident_obligations SET state = 'met', met_at = now()",
                "UPDATE qb_incident_obligations SET state = 'pending', met_at = NULL",
            ),
            (
                "qb_change_requests",
                "UPDATE qb_change_requests SET reason = 'nothing to see'",
                "UPDATE qb_change_requests SET reason = 'codec fixed'",
            ),
        ):
            c.sql(rewrite)
            code, said = verify(c)
            assert code == 1 and table in said, said
            named[table] = said.strip().splitlines()[-1][:200]
            c.sql(undo)
        assert verify(c)[0] == 0  # the wrong key wrote nothing; each rewrite is put back
        c.sql("DELETE FROM qb_schedule WHERE kind LIKE 'incident.%%'")  # escalations gone
        code, said = verify(c)
        assert code == 1 and "qb_schedule" in said, said
        named["qb_schedule"] = said.strip().splitlines()[-1][:200]
        facts = {"rewrites named by audit verify": named, "wrong key exit codes": exits}
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("wrong keys and rewritten history", facts)
    assert len(stored["rewrites named by audit verify"]) == 4
