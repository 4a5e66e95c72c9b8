"""Hostile Alertmanager notifications through a real `queuebot serve` on PostgreSQL (its
front and its worker process): none blocks another. What cannot be stored is refused at
intake with 400 naming the field; what was stored and cannot be processed (written by an
older queuebot, or by hand) is set aside, counted in /metrics and named in /readyz, while
every good notification sent beside them is posted; a SIGKILL and a restart change none
of that."""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit import web
from tests.integration.alerting import alert, notification
from tests.reliability.harness import Cluster, Figures, cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOKEN = "reliability-alert-token-7c1e0d9a4b2f"
NUL = "\x00"


def good(name: str) -> dict[str, Any]:
    group = {"alertname": name, "queue": "clips"}
    fingerprint = hashlib.sha256(name.encode()).hexdigest()[:16]
    return notification(group=group, alerts=[alert(fingerprint, labels=group)])


def hostile() -> list[tuple[str, bytes]]:
    """(what the 400 must name, the body) for each notification intake must refuse."""
    cases: list[tuple[str, dict[str, Any] | bytes]] = []
    for where in ("groupLabels.alertname", "groupKey", "receiver"):
        body = good("Hostile")
        if where == "groupLabels.alertname":
            body["groupLabels"]["alertname"] = f"Host{NUL}ile"
        elif where == "groupKey":
            body["groupKey"] = f'{{}}:{{alertname="Host{NUL}ile"}}'
        else:
            body["receiver"] = f"queue{NUL}bot"
        cases.append((where, body))
    late = good("Hostile")
    late["alerts"][0]["startsAt"] = "9999-12-31T23:59:59-23:59"
    cases.append(("alerts[0].startsAt", late))
    label = good("Hostile")
    label["alerts"][0]["labels"]["alertname"] = f"x{NUL}"
    cases.append(("alerts[0].labels.alertname", label))
    surrogate = json.dumps(good("Hostile")).replace('"clips"', '"cl\\ud800ips"', 1)
    cases.append(("", surrogate.encode()))
    cases.append(("", b'{"version": "4", "alerts": [{"labels": '))  # cut short
    return [(w, b if isinstance(b, bytes) else json.dumps(b).encode()) for w, b in cases]


def post(url: str, body: bytes) -> httpx.Response:
    return web.post(
        f"{url}/alerts/alertmanager",
        content=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        timeout=15,
    )


def store_directly(c: Cluster, payload: dict[str, Any]) -> int:
    """A row in the inbox that did not come through the webhook."""
    return int(
        c.scalar(
            "INSERT INTO qb_alert_inbox (source, received_at, receiver, group_key, status, "
            "payload) VALUES ('alertmanager', now(), 'queuebot', '{}:{alertname=\"Poison\"}', "
            "'firing', CAST(%s AS json)) RETURNING id",
            (json.dumps(payload),),
        )
    )


def posted(c: Cluster, name: str) -> bool:
    return any(
        f"FIRING: {name}" in json.dumps(call.body.get("blocks", []))
        for call in c.fake.recorded("/api/chat.postMessage")
    )


def wait(what: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_hostile_notifications_block_none_of_the_others(tmp_path: Path, figures: Figures) -> None:
    started = time.monotonic()
    toml = "\n[metrics]\nrefresh_seconds = 1\n"
    with cluster(tmp_path, toml=toml, env={"QUEUEBOT_ALERT_TOKEN": TOKEN}) as c:
        served = c.start()
        garbled = store_directly(c, {"version": "4", "alerts": "none"})
        nul = good("Poison")
        nul["groupLabels"]["alertname"] = f"Poi{NUL}son"  # as an older queuebot stored it
        stored_nul = store_directly(c, nul)
        goods = [(f"Good{n:02d}", json.dumps(good(f"Good{n:02d}")).encode()) for n in range(40)]
        bad = hostile()
        bodies = [b for _, b in goods] + [b for _, b in bad]
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda body: post(served.url, body), bodies))
        codes = [a.status_code for a in answers]
        assert codes[: len(goods)] == [200] * len(goods), codes
        refused = answers[len(goods) :]
        assert [a.status_code for a in refused] == [400] * len(bad), [a.text for a in refused]
        for (where, _), answer in zip(bad, refused, strict=True):
            assert where in answer.text, (where, answer.text)
        wait(lambda: all(posted(c, name) for name, _ in goods))
        aside = dict(
            c.sql("SELECT id, error FROM qb_alert_inbox WHERE set_aside_at IS NOT NULL ORDER BY id")
        )
        assert sorted(aside) == [garbled, stored_nul], aside

        def shown(url: str) -> bool:
            metrics = web.get(f"{url}/metrics", timeout=10).text
            return "queuebot_alert_notifications_set_aside 2.0" in metrics

        wait(lambda: shown(served.url))
        ready = web.get(f"{served.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["alerts"]["oldest"]["id"] == garbled

        served.kill()  # SIGKILL: the set-aside ones stay aside, nothing is retried
        again = c.start()
        assert post(again.url, json.dumps(good("AfterRestart")).encode()).status_code == 200
        wait(lambda: posted(c, "AfterRestart"))
        wait(lambda: shown(again.url))
        unprocessed = c.scalar(
            "SELECT count(*) FROM qb_alert_inbox WHERE processed_at IS NULL "
            "AND set_aside_at IS NULL"
        )
        facts = {
            "good notifications": len(goods) + 1,
            "good posted": sum(posted(c, name) for name, _ in goods) + posted(c, "AfterRestart"),
            "refused at intake (400 naming the field)": len(bad),
            "set aside in processing": len(aside),
            "left unprocessed": unprocessed,
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("hostile notifications", facts)
    assert stored["good posted"] == stored["good notifications"]
    assert stored["left unprocessed"] == 0
