"""The shipped Grafana dashboard (deploy/grafana/queuebot.json) asks Prometheus only what
it can answer: every panel's query parses (promtool checks them, written as recording
rules, with the dashboard's variables filled in), every selector in it keeps to the
chosen namespace, and every series it names, like every series the shipped alert rules
name, is one a running ``queuebot serve`` exposes on /metrics; and a real Prometheus
scraping that serve answers every query, whether its targets carry a namespace label (as
the Prometheus Operator's do) or not. promtool and prometheus are the Debian package
prometheus: the tests that need them are skipped without them, except under
QUEUEBOT_REQUIRE_PROMTOOL=1 (promtool) and QUEUEBOT_REQUIRE_ALERTING=1 (Prometheus), which
CI sets after installing them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit import web
from tests.e2e.alerting_stack import Prometheus
from tests.e2e.serving import Served, demo_database, running_serve
from tests.unit.test_prometheus_rules import RULES, run, tool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "queuebot.json"
# What Grafana puts in place of its variables when it sends a query. $namespace is empty
# where the targets have no namespace label (the variable then has no values), and
# namespace=~"" selects exactly the series without one.
VARIABLES = {
    "${namespace}": "",
    "$namespace": "",
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


def raw_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, as the dashboard writes it."""
    return [
        (panel["title"], target["expr"])
        for panel in panels(dashboard())
        for target in panel.get("targets", [])
    ]


def queries(namespace: str = "") -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, the variables filled in."""
    values = {**VARIABLES, "${namespace}": namespace, "$namespace": namespace}
    found = []
    for title, expr in raw_queries():
        for name, value in values.items():
            expr = expr.replace(name, value)
        found.append((title, expr))
    return found


# A selector: a metric name, its matchers in braces, or both (a quoted value may hold
# braces). PromQL has braces nowhere else; what names a series outside them is bare.
_SELECTOR = re.compile(
    r'(?<![\w:])([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}'
)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NAME = re.compile(r"(?<![\w:.$])[A-Za-z_:][A-Za-z0-9_:]*(?![\w:])")
_NOT_SERIES = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without"}


def selectors_without_namespace(expr: str) -> list[str]:
    """The selectors of ``expr`` (a query as the dashboard writes it, variables unfilled)
    that do not carry namespace=~"$namespace": a metric{...} whose matchers lack it, and
    every bare metric name (no braces at all)."""
    expr = re.sub(r"\$\{(\w+)\}", r"$\1", expr)  # ${var} is $var
    missing = []
    for match in _SELECTOR.finditer(expr):
        matchers = match.group(2)
        read = "".join(m.group(0) for m in _MATCHER.finditer(matchers))
        assert read.strip() == matchers.strip(), f"cannot read {match.group(0)} in {expr}"
        if ("namespace", "=~", "$namespace") not in _MATCHER.findall(matchers):
            missing.append(match.group(0))
    rest = _SELECTOR.sub(" ", expr)  # what is left names series without braces, if any
    rest = _STRING.sub(" ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # ranges and subqueries
    rest = _GROUPING.sub(" ", rest)
    for match in _NAME.finditer(rest):
        name = match.group(0)
        if name.lower() in _NOT_SERIES or rest[match.end() :].lstrip().startswith("("):
            continue  # a keyword, a function or an aggregation
        missing.append(name)
    return missing


def rule_queries() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [str(rule["expr"]) for group in groups for rule in group["rules"]]


def test_the_dashboard_is_importable_with_a_data_source_namespace_and_queue_choice() -> None:
    board = dashboard()
    assert board["schemaVersion"] == 39
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert list(variables) == ["datasource", "namespace", "queue"]
    namespace = variables["namespace"]
    assert namespace["label"] == "Namespace"
    assert namespace["type"] == "query"
    assert namespace["definition"] == 'label_values(up{job="queuebot"}, namespace)'
    assert namespace["query"]["query"] == namespace["definition"]
    # One queuebot at a time: "All" (or several) would take the max across two again.
    # Shown, though empty where targets have no namespace label.
    assert (namespace["multi"], namespace["includeAll"], namespace["hide"]) == (False, False, 0)
    queue = variables["queue"]
    assert queue["definition"] == (
        'label_values(queuebot_queue_jobs_by_state{namespace=~"$namespace"}, queue)'
    )
    assert queue["query"]["query"] == queue["definition"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Queues", "Changes and plans", "Incidents", "Delivery"]
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
    assert not [e for _, e in queries() if "$" in e]  # every variable was filled in


def test_every_selector_of_every_panel_keeps_to_the_chosen_namespace() -> None:
    """Two queuebots in two namespaces (the Prometheus Operator labels each target with
    its namespace) may have queues of the same name: a selector without the namespace
    would mix the other one into the max."""
    found = raw_queries()
    assert len(found) > 20
    assert [(t, e) for t, e in found if selectors_without_namespace(e)] == []


@pytest.mark.parametrize(
    ("expr", "missing"),
    [
        ('max(queuebot_a{namespace=~"$namespace"})', []),
        ('max(queuebot_a{ namespace =~ "${namespace}" , queue=~"$queue"})', []),
        ("max(queuebot_a)", ["queuebot_a"]),
        ('max(queuebot_a{queue=~"$queue"})', ['queuebot_a{queue=~"$queue"}']),
        ("max(queuebot_a{})", ["queuebot_a{}"]),
        ('max(queuebot_a{namespace="$namespace"})', ['queuebot_a{namespace="$namespace"}']),
        ("sum(rate(queuebot_a[$__rate_interval])) by (queue)", ["queuebot_a"]),
        ('queuebot_a{namespace=~"$namespace"} / on (queue) queuebot_b', ["queuebot_b"]),
        ('max(up{job="queuebot"} offset 5m)', ['up{job="queuebot"}']),
        ('{__name__="queuebot_a", namespace=~"$namespace"} > bool 1', []),
        (
            'label_replace(queuebot_a{queue=~"a{2}"}, "to", "$1", "from", "(.*)")',
            ['queuebot_a{queue=~"a{2}"}'],
        ),
        ("max_over_time(process_open_fds[5m:1m])", ["process_open_fds"]),
    ],
)
def test_a_selector_without_the_namespace_is_found(expr: str, missing: list[str]) -> None:
    """The check above reads PromQL well enough to catch a panel added without the filter."""
    assert selectors_without_namespace(expr) == missing


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
    return web.get(f"{served.url}/metrics", timeout=30).text


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


class NamespacedPrometheus(Prometheus):
    """Prometheus scraping its targets once per namespace, each time with the label
    namespace, as the Prometheus Operator labels every target it discovers: one serve
    stands for a queuebot in each of those namespaces."""

    def __init__(self, targets: list[str], namespaces: list[str], workdir: Path) -> None:
        super().__init__(targets, [], None, workdir=workdir)
        self.namespaces = namespaces

    def config(self) -> dict[str, Any]:
        doc = super().config()
        doc["scrape_configs"][0]["static_configs"] = [
            {"targets": self.targets, "labels": {"namespace": namespace}}
            for namespace in self.namespaces
        ]
        return doc


def label_values(prometheus: Prometheus, selector: str, label: str) -> list[str]:
    """What Grafana's label_values(selector, label) lists, asked as Grafana asks it."""
    resp = web.get(
        f"{prometheus.url}/api/v1/label/{label}/values", params={"match[]": selector}, timeout=10
    )
    resp.raise_for_status()
    found: list[str] = resp.json()["data"]
    return found


def variable_query(name: str, namespace: str) -> str:
    """The selector of the variable's label_values(...) query, $namespace filled in."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    definition = variables[name]["definition"].replace("$namespace", namespace)
    selector = re.fullmatch(r"label_values\((.+), (\w+)\)", definition)
    assert selector, definition
    return selector.group(1)


def expected_answers(exposition: str, namespace: str) -> list[str]:
    """The panel queries that have data to show: those whose series have samples (a
    plan's wave has none while no plan runs)."""
    sampled = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines()}
    expected = [e for _, e in queries(namespace) if set(SERIES.findall(e)) <= sampled]
    assert len(expected) > 20  # most panels have something to show on the demo
    return expected


def wait_for_answers(prometheus: Prometheus, namespace: str, expected: list[str]) -> None:
    empty: list[str] = []

    def answered() -> bool:
        answers = {e: prometheus.query(e) for _, e in queries(namespace)}  # each parses
        empty[:] = [e for e in expected if not answers[e]]
        return not empty

    prometheus.wait_for(answered, 60, f"data for every panel in namespace {namespace!r}")
    assert empty == []


@pytest.mark.alerting
def test_every_panel_query_answers_from_a_real_prometheus(
    served: Served, exposition: str, tmp_path: Path
) -> None:
    """Prometheus scraping the serve answers every panel's query, and with data wherever
    the series it asks for have samples. Its targets have no namespace label (as with
    deploy/prometheus/prometheus.yml): the namespace variable has no values, and with
    $namespace empty every panel still answers."""
    expected = expected_answers(exposition, "")
    with Prometheus([served.url], [], None, workdir=tmp_path) as prometheus:
        wait_for_answers(prometheus, "", expected)
        assert label_values(prometheus, variable_query("namespace", ""), "namespace") == []
        queues = label_values(prometheus, variable_query("queue", ""), "queue")
        assert len(queues) == 2, queues  # the demo's two queues


@pytest.mark.alerting
def test_every_panel_query_answers_for_the_chosen_namespace_only(
    served: Served, exposition: str, tmp_path: Path
) -> None:
    """Where every target carries its namespace (the Prometheus Operator's label), the
    namespace variable lists the namespaces, the queue variable the chosen one's queues,
    every panel answers for the chosen namespace, and no panel answers for a namespace
    without a queuebot: each query keeps to the namespace chosen."""
    expected = expected_answers(exposition, "blue")
    namespaces = ["blue", "green"]
    with NamespacedPrometheus([served.url], namespaces, tmp_path) as prometheus:
        wait_for_answers(prometheus, "blue", expected)
        listed = label_values(prometheus, variable_query("namespace", ""), "namespace")
        assert listed == namespaces
        queues = label_values(prometheus, variable_query("queue", "blue"), "queue")
        assert len(queues) == 2, queues
        assert label_values(prometheus, variable_query("queue", "red"), "queue") == []
        for namespace in ("red", ""):
            answering = [e for _, e in queries(namespace) if prometheus.query(e)]
            assert answering == [], namespace
