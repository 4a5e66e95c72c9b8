"""The shipped Grafana dashboard (deploy/grafana/queuebot.json) asks Prometheus only what
it can answer: every panel's query parses (promtool checks them, written as recording
rules, with the dashboard's variables filled in), and every series it names, like every
series the shipped alert rules name, is one a running ``queuebot serve`` exposes on
/metrics; and a real Prometheus scraping that serve answers every query. promtool and
prometheus are the Debian package prometheus: the tests that need them are skipped
without them, except under QUEUEBOT_REQUIRE_PROMTOOL=1 (promtool) and
QUEUEBOT_REQUIRE_ALERTING=1 (Prometheus), which CI sets after installing them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.alerting_stack import Prometheus, need_alerting
from tests.e2e.serving import Served, demo_database, running_serve
from tests.unit.test_prometheus_rules import RULES, run, tool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "queuebot.json"
# What Grafana puts in place of its variables when it sends a query
VARIABLES = {
    "${queue}": "workers",
    "$queue": "workers",
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
}
SERIES = re.compile(r"\bqueuebot_[a-z0-9_]+\b")


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, the variables filled in."""
    found = []
    for panel in panels(dashboard()):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found


def rule_queries() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [str(rule["expr"]) for group in groups for rule in group["rules"]]


def test_the_dashboard_is_importable_with_a_data_source_and_a_queue_choice() -> None:
    board = dashboard()
    assert board["schemaVersion"] == 39
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["queue"]["definition"] == "label_values(queuebot_queue_jobs_by_state, queue)"
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Queues", "Changes and plans", "Incidents", "Delivery"]
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
    assert not [e for _, e in queries() if "$" in e]  # every variable was filled in


def test_every_panel_query_parses(tmp_path: Path) -> None:
    promtool = tool("promtool")
    rules = [
        {"record": f"dashboard:panel_query_{n}", "expr": expr}
        for n, (_, expr) in enumerate(queries())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    said = run(promtool, "check", "rules", str(path))
    assert f"SUCCESS: {len(rules)} rules found" in said


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A running ``queuebot serve`` on the demo database (two queues configured)."""
    workdir = tmp_path_factory.mktemp("serve")
    with demo_database("sqlite", workdir) as db_url, running_serve(workdir, db_url, {}) as up:
        yield up


@pytest.fixture(scope="module")
def exposition(served: Served) -> str:
    return httpx.get(f"{served.url}/metrics", timeout=30).text


@pytest.fixture(scope="module")
def exposed(exposition: str) -> set[str]:
    """The series the serve declares on /metrics (# TYPE lines: a family is declared even
    while it has no sample, as a plan's wave while no plan runs)."""
    return set(re.findall(r"^# TYPE (\S+) ", exposition, flags=re.MULTILINE))


def test_every_series_the_dashboard_shows_is_exposed(exposed: set[str]) -> None:
    named = {name for _, expr in queries() for name in SERIES.findall(expr)}
    assert all(SERIES.search(expr) for _, expr in queries())  # each panel asks for ours
    assert {"queuebot_queue_jobs_by_state", "queuebot_plan_jobs_redriven_total"} <= named
    assert sorted(named - exposed) == []


def test_every_series_the_alert_rules_name_is_exposed(exposed: set[str]) -> None:
    named = {name for expr in rule_queries() for name in SERIES.findall(expr)}
    assert named  # the rules name some
    assert sorted(named - exposed) == []


@pytest.mark.alerting
def test_every_panel_query_answers_from_a_real_prometheus(
    served: Served, exposition: str, tmp_path: Path
) -> None:
    """Prometheus scraping the serve answers every panel's query, and with data wherever
    the series it asks for have samples (a plan's wave has none while no plan runs)."""
    need_alerting()
    sampled = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines()}
    expected = [e for _, e in queries() if set(SERIES.findall(e)) <= sampled]
    assert len(expected) > 20  # most panels have something to show on the demo
    with Prometheus([served.url], [], None, workdir=tmp_path) as prometheus:
        empty: list[str] = []

        def answered() -> bool:
            answers = {expr: prometheus.query(expr) for _, expr in queries()}  # each parses
            empty[:] = [e for e in expected if not answers[e]]
            return not empty

        prometheus.wait_for(answered, 60, "data for every panel whose series have samples")
    assert empty == []
