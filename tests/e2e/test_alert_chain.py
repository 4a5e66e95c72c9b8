"""The whole chain, with the real programs: a worker_queue estate with 15 failed jobs
whose reason is actionable -> `queuebot serve`'s /metrics -> Prometheus evaluating the
shipped rules file -> Alertmanager -> queuebot's webhook -> one Slack root with the
triage breakdown in its thread. Once the rows are fixed with SQL, the resolution reaches
the same thread.

The rules file is the shipped one with only the ``for:`` waits of its queue rules (group
queuebot) shortened to seconds (the rule's 15 minutes are proven by promtool's rule tests,
tests/unit/test_prometheus_rules.py). queuebot's rules about itself (group queuebot-self)
keep their waits of minutes, and against this healthy serve none of them is even pending.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.db import create_engine
from testkit.fake_slack import Call, FakeSlack
from tests.e2e.alerting_stack import Alertmanager, Prometheus
from tests.e2e.serving import demo_database, running_serve
from tests.helpers.config import DETECTORS_OFF

pytestmark = [pytest.mark.alerting, pytest.mark.postgres]

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"
SELF_GROUP = "  - name: queuebot-self\n"
TOKEN = "qb-alert-token-for-the-chain-test"
CONFIG = (
    """
[slack]
post_interval_seconds = 0.2
[metrics]
refresh_seconds = 1
"""
    + DETECTORS_OFF
)


def sql(db_url: str, *statements: str) -> None:
    async def run() -> None:
        engine = create_engine(db_url)
        try:
            async with engine.begin() as conn:
                for statement in statements:
                    await conn.execute(sa.text(statement))
        finally:
            await engine.dispose()

    asyncio.run(run())


def posts(fake: FakeSlack) -> list[Call]:
    return [c for c in fake.recorded() if c.path == "/api/chat.postMessage"]


def wait(check: object, timeout: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.2)


def test_failed_jobs_accumulating_from_prometheus_to_a_slack_thread(
    fake: FakeSlack, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yml"
    queue_rules, own_rules = RULES.read_text().split(SELF_GROUP)
    rules.write_text(re.sub(r"for: \d+m", "for: 2s", queue_rules) + SELF_GROUP + own_rules)
    with demo_database("postgres", tmp_path) as db_url:
        sql(
            db_url,
            "UPDATE dev_r_worker_queue SET status = 'cancelled' WHERE status = 'failed'",
            "INSERT INTO dev_r_worker_queue (issue_number, job_type, status, failure_reason,"
            " error_message) SELECT 70000 + n, 'implement-issue', 'failed',"
            " 'implementation_error', 'spawn-worker.sh exited 2: Invalid job_type'"
            " FROM generate_series(1, 15) AS n",
        )
        env = {
            "SLACK_BOT_TOKEN": "xoxb-fake",
            "SLACK_SIGNING_SECRET": "chain-signing-secret",
            "SLACK_API_BASE_URL": fake.api_url,
            "QUEUEBOT_ALERT_TOKEN": TOKEN,
        }
        with (
            running_serve(tmp_path, db_url, env, extra=CONFIG) as served,
            Alertmanager(f"{served.url}/alerts/alertmanager", token=TOKEN) as am,
            Prometheus([served.url], [rules], am.url) as prometheus,
        ):
            wait(lambda: [c for c in posts(fake) if not c.body.get("thread_ts")], 60, "root")
            (root,) = [c for c in posts(fake) if not c.body.get("thread_ts")]
            shown = str(root.body["blocks"])
            assert "FIRING: FailedJobsAccumulating · queue workers" in shown
            assert "Queue workers: 15 failed jobs need a look" in shown
            wait(lambda: _thread(fake, root), 30, "triage in the thread")
            triage = str(_thread(fake, root)[0].body["blocks"])
            assert "Triage: queue workers (worker_queue)" in triage
            assert "implementation_error" in triage
            assert "q:triage:workers" in triage and "q:failed:workers" in triage
            # a healthy serve meets none of the conditions of queuebot's own rules
            own = [a for a in prometheus.alerts() if a["labels"].get("component") == "queuebot"]
            assert own == []

            sql(
                db_url, "UPDATE dev_r_worker_queue SET status = 'cancelled' WHERE status = 'failed'"
            )
            wait(
                lambda: any(
                    "All alerts of this group are resolved" in str(c.body["blocks"])
                    for c in _thread(fake, root)
                ),
                60,
                "resolution in the thread",
            )
            assert len([c for c in posts(fake) if not c.body.get("thread_ts")]) == 1


def _thread(fake: FakeSlack, root: Call) -> list[Call]:
    return [c for c in posts(fake) if c.body.get("thread_ts") == root.ts]
