"""An alert storm during an incident, at test scale: the real `queuebot serve` on
PostgreSQL, the fake Slack taking one post a second per channel (429 with Retry-After
for one sooner), alert groups firing and changing through ``POST /alerts/alertmanager``,
and an incident declared by slash command with deadlines of seconds.

What a person would notice: every reminder and escalation of the incident is posted
within 5 s of its due time, however busy the alert channels are; every group's final
state (its root showing it resolved, the resolution in its thread) is posted soon after
the storm ends; and no channel is ever posted to faster than Slack takes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from testkit import web
from testkit.slack_requests import slash_fields
from testkit.storm import (
    Answered,
    Storm,
    final_states,
    incident_dues,
    incident_lags,
    paces,
    percentile,
    root_lags,
    storm_toml,
)
from tests.helpers.people import SLACK_DORA
from tests.integration.test_incident_timers import drill_runbook
from tests.reliability.harness import Cluster, Delivery, Figures, cluster, send, wait_answer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOKEN = "storm-alert-token-5d0c1e7a93b24f68"
STORM = Storm(groups=36, channels=6, seconds=10.0, fire_within=2.0, change_every=0.5)
REMIND_AT = (0.5, 0.8)
SCENARIO = "gd:storm-drill"
ON_TIME = 5.0  # seconds after its due time a reminder or escalation may be posted
SETTLED = 25.0  # seconds after the storm every group's final state must be posted by


def declare(c: Cluster, served_url: str) -> float:
    """Dora's `/incident declare` in #operators; when it was acknowledged (monotonic)."""
    name = f"declare-{time.time_ns()}"
    fields = slash_fields(
        c.fake, f'declare {SCENARIO} "clips stopped"', name=name, user=SLACK_DORA, trigger=name
    )
    d = Delivery(urlencode({**fields, "command": "/incident"}), f"slack:command:{name}", name)
    assert send(served_url, d).status_code == 200
    acked = time.monotonic()
    assert "declared" in str(wait_answer(c.fake, d).body)
    return acked


def warm_up(c: Cluster, url: str) -> None:
    """Until serve's worker posts: one alert group, its root in #alerts."""
    body = Storm(groups=1, channels=1, seconds=0).body(0, 1)
    body["groupLabels"] = body["commonLabels"] = {"alertname": "Warmup"}
    body["groupKey"] = '{}:{alertname="Warmup"}'
    answer = web.post(
        f"{url}/alerts/alertmanager",
        json=body,
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    c.fake.wait_for(lambda call: str(call.body.get("text", "")).startswith("Warmup"), timeout=60)


def run_storm(url: str, answered: Answered, started: float) -> None:
    """Alertmanager's side: every notification at its moment after ``started``."""
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}) as client:
        for s in STORM.sends():
            time.sleep(max(0.0, started + s.at - time.monotonic()))
            answer = client.post("/alerts/alertmanager", json=s.body, timeout=10)
            answered.record(s, answer.status_code, time.monotonic())


def test_incident_posts_are_on_time_during_an_alert_storm(tmp_path: Path, figures: Figures) -> None:
    drill_runbook(tmp_path / "runbooks", SCENARIO, operators_ms=6_000, actors_ms=9_000)
    toml = storm_toml(STORM.channels) + '\n[runbooks]\ndir = "runbooks"\n'
    with cluster(tmp_path, toml=toml, env={"QUEUEBOT_ALERT_TOKEN": TOKEN}) as c:
        text = c.config.read_text()  # Slack's pace, as in production
        c.config.write_text(text.replace("post_interval_seconds = 0", "post_interval_seconds = 1"))
        c.fake.pace(1.0, retry_after=1)
        served = c.start()
        warm_up(c, served.url)
        answered = Answered()
        started = time.monotonic()
        storm = threading.Thread(target=run_storm, args=(served.url, answered, started))
        storm.start()
        time.sleep(0.5)  # the storm is on
        declared = declare(c, served.url)
        offset = time.time() - time.monotonic()
        obligations = [
            (int(n), str(audience), declared_at.timestamp() - offset, due.timestamp() - offset)
            for n, audience, declared_at, due in c.sql(
                "SELECT o.incident_id, o.audience, i.declared_at, o.due_at "
                "FROM qb_incident_obligations o JOIN qb_incidents i ON i.id = o.incident_id"
            )
        ]
        owed = incident_dues(obligations, REMIND_AT)
        storm.join(timeout=60)
        ended = time.monotonic()

        deadline = ended + SETTLED + 10
        while time.monotonic() < deadline:
            finals = final_states(c.fake, STORM)
            lags = incident_lags(c.fake, owed)
            if all(v is not None for v in finals.values()) and None not in lags.values():
                break
            time.sleep(0.2)
        finals = final_states(c.fake, STORM)
        lags = incident_lags(c.fake, owed)
        pace = paces(c.fake)
        settled = [at - answered.resolved[g] for g, at in finals.items() if at is not None]
        checklist = [
            call.at - declared
            for call in c.fake.recorded("/api/chat.postMessage")
            if str(call.body.get("text", "")).startswith("INC-1 declared")
        ]
        by_kind: dict[str, list[float]] = {}
        for due, lag in lags.items():
            if lag is not None:
                by_kind.setdefault(due.kind, []).append(lag)
        shown: dict[str, Any] = {
            "alert groups": STORM.groups,
            "channels": STORM.channels,
            "notifications answered 200": len(STORM.sends()) - answered.refused,
            "incident posts owed": len(owed),
            "incident posts made": sum(v is not None for v in lags.values()),
            "checklist after the ack, s": round(checklist[0], 2) if checklist else None,
            "lag p50 / max, s": {
                kind: [round(percentile(v, 0.5), 2), round(max(v), 2)]
                for kind, v in sorted(by_kind.items())
            },
            "alert root lag p50 / max, s": [
                round(percentile(r, 0.5), 2),
                round(max(r), 2),
            ]
            if (r := root_lags(c.fake, STORM, answered))
            else None,
            "groups whose final state was posted": len(settled),
            "final state after the storm's end, max s": round(max(settled), 2) if settled else None,
            "posts per channel, most in one second, 429s": {
                ch: [p.posts, p.most_in_a_second, p.refused] for ch, p in pace.items()
            },
        }
        got = figures.record("alert storm", shown)

        late = {f"{d.kind} INC-{d.incident} {d.audience}": lag for d, lag in lags.items()}
        assert all(lag is not None and lag <= ON_TIME for lag in late.values()), late
        assert answered.refused == 0
        assert checklist and checklist[0] <= ON_TIME
        assert got["groups whose final state was posted"] == STORM.groups, finals
        assert max(settled) <= SETTLED
        assert all(p.most_in_a_second <= 1 and p.refused == 0 for p in pace.values()), pace
