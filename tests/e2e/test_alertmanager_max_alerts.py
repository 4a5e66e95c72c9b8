"""A large alert group still arrives: the real Alertmanager 0.25, configured with the
shipped receiver's `max_alerts` (deploy/alertmanager.yml), sends a group of 2,000 alerts
with long annotations (whole, far over queuebot's default body limit of 256 KB) to the
real `queuebot serve`, which takes it (200, never 413) and says in the group's root and
thread how many alerts Alertmanager left out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from testkit import web
from testkit.fake_slack import FakeSlack
from tests.e2e.alerting_stack import Alertmanager, wait_for
from tests.e2e.serving import Served, serve_posting_to

pytestmark = pytest.mark.alerting

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager.yml"
TOKEN = "qb-alert-token-for-the-max-alerts-test"
DEFAULT_BODY_LIMIT = 256 * 1024  # [http] max_body_kb's default
ALERTS = 2000


def shipped_max_alerts() -> int:
    """The receiver's max_alerts in the shipped file (one webhook_config, one setting)."""
    found = re.findall(r"^\s+max_alerts:\s*(\d+)\s*(?:#.*)?$", SHIPPED.read_text(), re.MULTILINE)
    assert len(found) == 1, f"{SHIPPED} sets max_alerts {len(found)} times"
    return int(found[0])


@pytest.fixture
def served(fake: FakeSlack, tmp_path: Path) -> Iterator[Served]:
    with serve_posting_to(fake, tmp_path, "sqlite", TOKEN, post_interval=0.2) as serve:
        yield serve


def flood() -> list[dict[str, Any]]:
    """2,000 alerts of one group, each with the words a real rule gives (a summary and a
    description of a few hundred characters, a runbook link)."""
    return [
        {
            "labels": {"alertname": "JobsFlood", "queue": "workers", "job_id": f"job-{n:05d}"},
            "annotations": {
                "summary": f"job-{n:05d} of queue workers failed and is waiting for a person",
                "description": (
                    f"Job job-{n:05d} failed with an actionable reason (timeout) three times "
                    "in a row; the retry worker stopped retrying it. Look at it with "
                    f"/queue show job-{n:05d} --queue workers, fix the cause, then requeue "
                    "it. Jobs of the same kind that failed the same way are listed by "
                    "/queue dlq --queue workers --failure-reason timeout."
                ),
                "runbook_url": "https://runbooks.example.internal/queues/workers/jobs-flood",
            },
            "generatorURL": "http://prometheus.example.internal:9090/graph?g0.expr=jobs_flood",
        }
        for n in range(ALERTS)
    ]


def webhook_counts(am: Alertmanager) -> tuple[float, float]:
    """Alertmanager's own count of webhook notifications sent, and of those that failed."""
    text = web.get(f"{am.url}/metrics", timeout=5).text

    def total(name: str) -> float:
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + "{") and 'integration="webhook"' in line
        )

    return (
        total("alertmanager_notifications_total"),
        total("alertmanager_notifications_failed_total"),
    )


def test_a_group_larger_than_the_body_limit_arrives_cut_and_says_how_many(
    fake: FakeSlack, served: Served
) -> None:
    limit = shipped_max_alerts()
    alerts = flood()
    # whole, the group would never fit: the shipped max_alerts is what makes it arrive
    assert len(orjson.dumps(alerts)) > DEFAULT_BODY_LIMIT
    with Alertmanager(
        f"{served.url}/alerts/alertmanager",
        token=TOKEN,
        group_by=("alertname", "queue"),
        group_interval="10s",
        repeat_interval="1h",
        max_alerts=limit,
    ) as am:
        am.post_alerts(alerts)
        wait_for(lambda: webhook_counts(am)[0] >= 1, 15, what="Alertmanager to send the group")
        cut = f"{ALERTS - limit:,}"

        def root() -> Any:
            return next(
                (
                    c
                    for c in fake.recorded("/api/chat.postMessage")
                    if not c.body.get("thread_ts") and "JobsFlood" in str(c.body["blocks"])
                ),
                None,
            )

        posted = wait_for(root, 10, what="the group's root in Slack")
        blocks = str(posted.body["blocks"])
        assert f"{limit} of {limit} alert(s)" in blocks
        assert f"{cut} more alert(s) Alertmanager left out" in blocks

        def note() -> Any:
            return next(
                (
                    c
                    for c in fake.recorded("/api/chat.postMessage")
                    if c.body.get("thread_ts") == posted.ts
                    and f"{cut} more alert(s) not shown" in str(c.body)
                ),
                None,
            )

        said = wait_for(note, 10, what="the thread's note of the alerts left out")
        assert "max_alerts" in str(said.body["blocks"])
        # queuebot took it at the first try: no send failed, none was refused
        assert webhook_counts(am)[1] == 0, am.log_tail()
    # the body limit logs each refusal ("refused POST '/alerts/...' from ... with 413: ...")
    assert "request body too large" not in served.log.read_text()
    assert not re.search(r"refused \S+ \S+ from \S+ with 413", served.log.read_text())
