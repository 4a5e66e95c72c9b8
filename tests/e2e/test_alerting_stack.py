"""The alerting harness against the real programs: what Alertmanager 0.25 sends a webhook,
when it retries, and Prometheus's rule alerts reaching it, observed with a local receiver.

The bodies of tests (a), (b) and (e) are compared with the fixtures in
tests/fixtures/alertmanager/ (same keys, same kinds of value, same timestamp forms); run
with ``QUEUEBOT_RECORD_ALERTMANAGER_FIXTURES=1`` to write them anew from what arrives.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.e2e.alerting_stack import (
    AMTOOL_BIN,
    PROMTOOL_BIN,
    Alertmanager,
    Prometheus,
    listening_addresses,
    wait_for,
)

pytestmark = pytest.mark.alerting

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alertmanager"
RECORD = os.environ.get("QUEUEBOT_RECORD_ALERTMANAGER_FIXTURES") == "1"
ZERO_TIME = "0001-01-01T00:00:00Z"
# Go's RFC 3339 with nanoseconds, trailing zeros cut: 0 to 9 fractional digits.
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
TOKEN = "qb-test-token-7c1e"
LABELS = {"alertname": "QueueDeadLetters", "queue": "emails", "severity": "page"}
ANNOTATIONS = {"summary": "emails has 7 dead letters", "runbook": "/queue triage emails"}
GROUP_KEY = '{}:{alertname="QueueDeadLetters", queue="emails"}'


@dataclass(frozen=True)
class Delivery:
    at: float  # time.monotonic() on arrival
    path: str
    headers: dict[str, str]
    raw: bytes
    answered: int

    @property
    def body(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.raw)
        return parsed


class Receiver:
    """A webhook receiver in a thread: records every POST and answers the statuses queued
    with ``answer`` (then 200)."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._answers: list[int] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    status = receiver._answers.pop(0) if receiver._answers else 200
                    receiver.deliveries.append(
                        Delivery(time.monotonic(), self.path, dict(self.headers), raw, status)
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts/alertmanager"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, *statuses: int) -> None:
        with self._lock:
            self._answers.extend(statuses)

    def got(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for_count(self, n: int, timeout: float) -> list[Delivery]:
        return wait_for(
            lambda: self.got() if len(self.got()) >= n else None,
            timeout,
            what=f"{n} deliveries (have {len(self.got())})",
        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _shape(value: Any) -> Any:
    """What a parser relies on: keys, kinds of value, timestamp forms; not the values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    if isinstance(value, str) and TIMESTAMP.match(value):
        return "zero time" if value == ZERO_TIME else "timestamp"
    return type(value).__name__


def _check_fixture(name: str, delivery: Delivery) -> None:
    path = FIXTURES / name
    if RECORD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(delivery.raw)
    recorded = json.loads(path.read_bytes())
    assert _shape(delivery.body) == _shape(recorded), f"{name} no longer matches what arrives"


def _parse_time(text: str) -> datetime:
    assert TIMESTAMP.match(text), text
    return datetime.fromisoformat(text)  # Python 3.11 takes the Z and cuts to microseconds


def test_generated_configurations_are_valid(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(_RULES)
    with_token = Alertmanager("http://127.0.0.1:1/alerts/alertmanager", token=TOKEN)
    without = Alertmanager("http://127.0.0.1:1/alerts/alertmanager", send_resolved=False)
    prom = Prometheus(["127.0.0.1:1"], [rules], "http://127.0.0.1:2")
    try:
        for am in (with_token, without):
            am.write_config()
            check = subprocess.run(
                [AMTOOL_BIN, "check-config", str(am.config_path)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert check.returncode == 0, check.stdout + check.stderr
        prom.write_config()
        check = subprocess.run(
            [PROMTOOL_BIN, "check", "config", str(prom.config_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert "1 rules found" in check.stdout
    finally:
        for program in (with_token, without, prom):
            program.close()
    with pytest.raises(ValueError, match="repeat_interval"):
        Alertmanager("http://127.0.0.1:1/", group_interval="5s", repeat_interval="4s")
    with pytest.raises(ValueError, match="cannot be zero"):
        Alertmanager("http://127.0.0.1:1/", group_interval="0s")


def test_delivery_repeats_and_resolution(receiver: Receiver) -> None:
    """(a) a posted alert arrives with the token, version 4, the group key; (c) it is sent
    again, byte for byte, at the first flush at least repeat_interval after the last
    send; (b) its resolution arrives at the next flush. Flushed every second and repeated
    after 2 s, so the repeats come quickly yet cannot be mistaken for flushes."""
    with Alertmanager(receiver.url, token=TOKEN, group_interval="1s", repeat_interval="2s") as am:
        # Clustering is off: the web port is all it listens on (not 9094).
        assert listening_addresses(am.pid) == {f"127.0.0.1:{am.port}"}
        posted = time.monotonic()
        am.post_alerts(
            [{"labels": LABELS, "annotations": ANNOTATIONS, "generatorURL": "http://qb/graph"}]
        )
        first = receiver.wait_for_count(1, 5)[0]
        # group_wait is 1s
        assert 0.8 < first.at - posted < 4.0, first.at - posted
        assert first.path == "/alerts/alertmanager"
        assert first.headers["Authorization"] == f"Bearer {TOKEN}"
        assert first.headers["Content-Type"] == "application/json"
        assert first.headers["User-Agent"] == "Alertmanager/0.25.0"
        body = first.body
        assert body["version"] == "4"
        assert body["status"] == "firing"
        assert body["receiver"] == "queuebot"
        assert body["groupKey"] == GROUP_KEY
        assert body["groupLabels"] == {"alertname": "QueueDeadLetters", "queue": "emails"}
        assert body["commonLabels"] == LABELS
        assert body["commonAnnotations"] == ANNOTATIONS
        assert body["truncatedAlerts"] == 0
        [alert] = body["alerts"]
        assert alert["status"] == "firing"
        assert alert["labels"] == LABELS
        assert alert["annotations"] == ANNOTATIONS
        assert alert["endsAt"] == ZERO_TIME
        assert alert["generatorURL"] == "http://qb/graph"
        assert re.fullmatch(r"[0-9a-f]{16}", alert["fingerprint"])
        # Alertmanager stamped startsAt with its own clock, to the nanosecond.
        assert re.search(r"\.\d+Z$", alert["startsAt"]), alert["startsAt"]
        _parse_time(alert["startsAt"])
        _check_fixture("firing.json", first)

        # (c) two repeats, unchanged
        first, *repeats = receiver.wait_for_count(3, 20)[:3]
        for before, after in itertools.pairwise([first, *repeats]):
            gap = after.at - before.at
            print(f"repeat after {gap:.2f} s")
            # 2s repeat_interval, considered at flushes every 1s: 2 s or 3 s apart
            assert 1.8 < gap < 4.5, gap
            assert after.raw == first.raw

        am.resolve(LABELS)
        resolved_at = time.monotonic()
        resolved = wait_for(
            lambda: [d for d in receiver.got() if d.body["status"] == "resolved"], 5
        )[0]
        print(f"resolved {resolved.at - resolved_at:.2f} s after the post")
        assert resolved.at - resolved_at < 3.5  # the next flush, group_interval 1s
        rbody = resolved.body
        assert rbody["groupKey"] == GROUP_KEY
        assert rbody["version"] == "4"
        [ralert] = rbody["alerts"]
        assert ralert["status"] == "resolved"
        assert ralert["fingerprint"] == alert["fingerprint"]
        assert ralert["startsAt"] == alert["startsAt"]
        assert ralert["annotations"] == ANNOTATIONS
        assert _parse_time(ralert["endsAt"]) > _parse_time(alert["startsAt"])
        _check_fixture("resolved.json", resolved)
        # Once resolved and told, nothing more is sent for it: Alertmanager drops the
        # group, and past the flush that would have come next, nothing arrived.
        count = len(receiver.got())
        am.wait_for(lambda: am.groups() == [], 5, "the resolved group to be dropped")
        time.sleep(1.0)  # one group_interval
        assert len(receiver.got()) == count
    with pytest.raises(ProcessLookupError):
        os.kill(am.pid, 0)  # stopped and reaped


def test_a_503_is_retried_within_the_same_send(receiver: Receiver) -> None:
    """(d) 5xx: Alertmanager tries again after a backoff (0.3 to 0.7 s at first, growing
    by about half each time, jittered) within one notification, which has
    max(group_interval, 10 s); the body is the same each time."""
    receiver.answer(503, 503, 503)
    # A long group_interval, so the retries cannot be the next flush's sends.
    with Alertmanager(receiver.url, group_interval="20s", repeat_interval="1h") as am:
        am.post_alerts([{"labels": LABELS, "annotations": ANNOTATIONS}])
        tries = receiver.wait_for_count(4, 12)
        assert [d.answered for d in tries] == [503, 503, 503, 200]
        gaps = [round(b.at - a.at, 2) for a, b in itertools.pairwise(tries)]
        print("503 retry gaps (s):", gaps)
        assert all(0.1 < g < 4.0 for g in gaps), gaps
        assert all(d.raw == tries[0].raw for d in tries)
        assert "Authorization" not in tries[0].headers  # no token configured
        am.wait_for(lambda: 'msg="Notify success" attempts=4' in am.log(), 3, "the log")


def test_a_400_is_not_retried_until_the_next_flush(receiver: Receiver) -> None:
    """(d) 4xx: no retry within the notification; the next flush (group_interval later)
    sends it again, since nothing was recorded as sent."""
    receiver.answer(400)
    with Alertmanager(receiver.url, group_interval="2s") as am:
        am.post_alerts([{"labels": LABELS, "annotations": ANNOTATIONS}])
        tries = receiver.wait_for_count(2, 8)
        assert [d.answered for d in tries[:2]] == [400, 200]
        gap = tries[1].at - tries[0].at
        print(f"400, then the next send after {gap:.2f} s")
        assert 1.5 < gap < 4.5, gap  # a retry would come after 0.3 to 0.7 s
        assert tries[1].raw == tries[0].raw
        assert "unrecoverable error after 1 attempts" in am.log()


def test_what_makes_a_new_notification(receiver: Receiver) -> None:
    """A changed annotation alone sends nothing (it shows in the next repeat or the next
    change of the group's alerts); a new alert in the group is sent at the next flush,
    with every alert of the group in one body; so is one alert of the group resolving."""
    with Alertmanager(
        receiver.url, group_interval="1s", repeat_interval="1h", log_level="debug"
    ) as am:
        am.post_alerts([{"labels": LABELS, "annotations": {"summary": "7 dead letters"}}])
        receiver.wait_for_count(1, 5)
        am.post_alerts([{"labels": LABELS, "annotations": {"summary": "9 dead letters"}}])
        # past the next flush: the one after it has begun, so the next one sent nothing
        flushed = am.flushes()
        am.wait_for(lambda: am.flushes() >= flushed + 2, 10, "two more flushes")
        assert len(receiver.got()) == 1
        ticket = {**LABELS, "severity": "ticket"}
        am.post_alerts([{"labels": ticket, "annotations": {"summary": "a ticket"}}])
        posted = time.monotonic()
        second = receiver.wait_for_count(2, 5)[1]
        assert second.at - posted < 4.5  # the next flush
        body = second.body
        assert body["groupKey"] == GROUP_KEY
        assert [(a["labels"], a["annotations"]) for a in body["alerts"]] == [
            (LABELS, {"summary": "9 dead letters"}),
            (ticket, {"summary": "a ticket"}),
        ]
        assert body["commonLabels"] == {"alertname": "QueueDeadLetters", "queue": "emails"}
        assert body["commonAnnotations"] == {}
        _check_fixture("firing_two_alerts.json", second)

        # One of them resolved: the body is still "firing"; each alert says its own status.
        am.resolve(ticket)
        third = receiver.wait_for_count(3, 5)[2].body
        assert third["status"] == "firing"
        assert [(a["labels"]["severity"], a["status"]) for a in third["alerts"]] == [
            ("page", "firing"),
            ("ticket", "resolved"),
        ]
        assert third["alerts"][1]["endsAt"] != ZERO_TIME
        _check_fixture("firing_and_resolved.json", receiver.got()[2])


_RULES = """\
groups:
  - name: queuebot-test
    rules:
      - alert: QueueDeadLetters
        expr: queuebot_test_dead_letters > 0
        for: 1s
        labels:
          severity: page
        annotations:
          summary: "{{ $labels.queue }} has {{ $value }} dead letters"
"""


def test_a_prometheus_rule_alert_reaches_the_receiver(receiver: Receiver, tmp_path: Path) -> None:
    """(e) Prometheus scrapes a gauge, its rule fires after ``for``, Alertmanager
    delivers; the gauge back at 0 resolves it."""
    registry = CollectorRegistry()
    dead = Gauge("queuebot_test_dead_letters", "dead letters", ["queue"], registry=registry)
    dead.labels(queue="emails").set(0)
    metrics, metrics_thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    rules = tmp_path / "rules.yml"
    rules.write_text(_RULES)
    target = f"127.0.0.1:{metrics.server_address[1]}"
    try:
        with (
            # flushed every second: the resolution is sent a second after it arrives
            Alertmanager(receiver.url, token=TOKEN, group_interval="1s") as am,
            Prometheus([target], [rules], am.url) as prom,
        ):
            # The first scrape waits for the scrape manager's 5 s reload tick.
            prom.wait_for(prom.targets_up, 15, "the first scrape")
            assert prom.query("queuebot_test_dead_letters")[0]["metric"]["queue"] == "emails"
            dead.labels(queue="emails").set(7)
            set_at = time.monotonic()
            pending = prom.wait_for(
                lambda: [a for a in prom.alerts() if a["state"] in ("pending", "firing")],
                5,
                "the rule to match",
            )
            assert pending[0]["labels"]["alertname"] == "QueueDeadLetters"
            firing = receiver.wait_for_count(1, 15)[0]
            print(f"gauge set to the receiver: {firing.at - set_at:.2f} s")
            body = firing.body
            assert firing.headers["Authorization"] == f"Bearer {TOKEN}"
            assert body["status"] == "firing"
            assert body["groupKey"] == GROUP_KEY
            [alert] = body["alerts"]
            assert alert["labels"] == {**LABELS, "instance": target, "job": "queuebot"}
            assert alert["annotations"] == {"summary": "emails has 7 dead letters"}
            assert alert["endsAt"] == ZERO_TIME
            assert "/graph?g0.expr=" in alert["generatorURL"]
            _parse_time(alert["startsAt"])  # Prometheus's clock, milliseconds at most
            assert len(alert["startsAt"]) <= len("2026-01-01T00:00:00.000Z")
            assert am.alerts()[0]["labels"] == alert["labels"]
            _check_fixture("prometheus_firing.json", firing)

            dead.labels(queue="emails").set(0)
            resolved = wait_for(
                lambda: [d for d in receiver.got() if d.body["status"] == "resolved"], 10
            )[0]
            [ralert] = resolved.body["alerts"]
            assert ralert["fingerprint"] == alert["fingerprint"]
            assert ralert["startsAt"] == alert["startsAt"]
            assert _parse_time(ralert["endsAt"]) > _parse_time(alert["startsAt"])
            _check_fixture("prometheus_resolved.json", resolved)
    finally:
        metrics.shutdown()
        metrics.server_close()
        metrics_thread.join(timeout=5)


SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager.yml"


class ShippedAlertmanager(Alertmanager):
    """Alertmanager running deploy/alertmanager.yml as shipped, its routes and receivers
    untouched but for where they send (this test's receivers) and the files their
    secrets are read from; the waits shortened so that a test sees a notification in
    seconds."""

    def __init__(self, queuebot_url: str, paging_url: str, token_file: Path, key_file: Path):
        super().__init__(queuebot_url)
        self.paging_url = paging_url
        self.token_file = token_file
        self.key_file = key_file

    def config(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
        doc["route"].update(group_wait="1s", group_interval="2s", repeat_interval="1h")
        receivers = {r["name"]: r for r in doc["receivers"]}
        [hook] = receivers["queuebot"]["webhook_configs"]
        hook["url"] = self.webhook_url
        hook["http_config"]["authorization"]["credentials_file"] = str(self.token_file)
        [pagerduty] = receivers["queuebot-operators"]["pagerduty_configs"]
        pagerduty["url"] = self.paging_url
        pagerduty["routing_key_file"] = str(self.key_file)
        return doc


def test_the_shipped_configuration_pages_for_queuebot_itself_and_posts_every_alert(
    receiver: Receiver, tmp_path: Path
) -> None:
    """deploy/alertmanager.yml with the real Alertmanager: a critical alert about queuebot
    itself (component=queuebot) reaches the paging receiver, as a PagerDuty Events API v2
    event with the key read from its file, and queuebot's webhook too; a warning about it
    and a queue's alert reach queuebot alone. The key file is written after Alertmanager
    started: it is read when a notification goes out, not when the configuration loads."""
    paging = Receiver()
    token_file = tmp_path / "queuebot-alert-token"
    token_file.write_text(TOKEN)
    key_file = tmp_path / "paging-routing-key"
    key = "0123456789abcdef0123456789abcdef"
    try:
        with ShippedAlertmanager(receiver.url, paging.url, token_file, key_file) as am:
            key_file.write_text(key + "\n")
            am.post_alerts(
                [
                    {
                        "labels": {
                            "alertname": "QueuebotDown",
                            "severity": "critical",
                            "component": "queuebot",
                        },
                        "annotations": {"summary": "queuebot is down"},
                    },
                    {
                        "labels": {
                            "alertname": "QueuebotQueueUnreadable",
                            "severity": "warning",
                            "component": "queuebot",
                            "queue": "workers",
                        },
                        "annotations": {"summary": "queuebot cannot read queue workers"},
                    },
                    {
                        "labels": {
                            "alertname": "FailedJobsAccumulating",
                            "severity": "warning",
                            "queue": "workers",
                        },
                        "annotations": {"summary": "Queue workers: 15 failed jobs need a look"},
                    },
                ]
            )
            paging.wait_for_count(1, 15)
            receiver.wait_for_count(3, 15)
            time.sleep(3)  # a group_interval more: nothing else arrives
            events, posts = paging.got(), receiver.got()
        # the critical alert pages; the warning is posted by queuebot alone
        assert len(events) == 1 and len(posts) == 3
        # the page's title is the rule's summary, its severity the rule's
        titles = {e.body["payload"]["summary"]: e.body["payload"]["severity"] for e in events}
        assert titles == {"queuebot is down": "critical"}
        for event in events:
            assert event.body["routing_key"] == key  # the file's newline left out
            assert event.body["event_action"] == "trigger"
            assert "Authorization" not in event.headers  # the key travels in the body only
        assert {p.body["groupLabels"]["alertname"] for p in posts} == {
            "QueuebotDown",
            "QueuebotQueueUnreadable",
            "FailedJobsAccumulating",
        }
        for post in posts:
            assert post.body["receiver"] == "queuebot"
            assert post.headers["Authorization"] == f"Bearer {TOKEN}"
    finally:
        paging.close()
