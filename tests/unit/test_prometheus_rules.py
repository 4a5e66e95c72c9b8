"""The shipped Prometheus rules and Alertmanager configuration load, and the rules fire
when they should and stay quiet when they should (promtool test rules, with synthetic
series in prometheus_rules_test.yml). Needs promtool and amtool (Debian packages
prometheus and prometheus-alertmanager): skipped without them, except under
QUEUEBOT_REQUIRE_PROMTOOL=1, which CI sets after installing them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
RULE_TESTS = Path(__file__).with_name("prometheus_rules_test.yml")
ALERTMANAGER = ROOT / "deploy" / "alertmanager.yml"
PACKAGES = {"promtool": "prometheus", "amtool": "prometheus-alertmanager"}
REQUIRED = os.environ.get("QUEUEBOT_REQUIRE_PROMTOOL") == "1"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        why = f"{name} is not installed (Debian package {PACKAGES[name]}; CI installs it)"
        if REQUIRED:
            pytest.fail(f"QUEUEBOT_REQUIRE_PROMTOOL=1 but {why}")
        pytest.skip(why)
    return found


def run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=ROOT)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    return said


def rules_by_group() -> dict[str, list[dict[str, Any]]]:
    """The shipped rules, by their group's name."""
    return {g["name"]: g["rules"] for g in yaml.safe_load(RULES.read_text())["groups"]}


def test_the_rules_load() -> None:
    said = run(tool("promtool"), "check", "rules", str(RULES))
    assert "SUCCESS: 9 rules found" in said


def test_queuebots_own_rules_say_so_and_the_queue_rules_name_their_queue() -> None:
    """The group queuebot-self is what alertmanager.yml sends to people as well: each of
    its rules carries component: queuebot and a severity; the queue rules carry neither
    the component (they would page the operators) nor lose their queue."""
    groups = rules_by_group()
    assert set(groups) == {"queuebot", "queuebot-self"}
    for rule in groups["queuebot-self"]:
        assert rule["labels"]["component"] == "queuebot", rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        assert "docs/" in rule["annotations"]["description"], rule["alert"]  # where to look
    for rule in groups["queuebot"]:
        assert "component" not in rule["labels"], rule["alert"]
        assert "{{ $labels.queue }}" in rule["annotations"]["summary"], rule["alert"]


def test_every_rule_keeps_the_namespace() -> None:
    """Each aggregation and each join of every rule is by namespace (the label the
    Prometheus Operator gives each target): two queuebots in two namespaces alert apart,
    and each alert names the namespace its AlertmanagerConfig matches. absent(), when no
    target is found at all, has none to keep."""
    for rules in rules_by_group().values():
        for rule in rules:
            expr = " ".join(rule["expr"].split())
            assert not re.search(r"\b(max|min|sum|count|avg)\s*\(", expr), rule["alert"]
            for kept in re.findall(r"\b(?:by|on) \(([^)]*)\)", expr):
                assert kept == "" or "namespace" in kept.split(", "), (rule["alert"], kept)


def test_the_rules_fire_when_they_should_and_only_then() -> None:
    said = run(tool("promtool"), "test", "rules", str(RULE_TESTS))
    assert "SUCCESS" in said


def test_the_alertmanager_example_loads_and_sends_to_queuebot() -> None:
    said = run(tool("amtool"), "check-config", str(ALERTMANAGER))
    assert "SUCCESS" in said
    text = ALERTMANAGER.read_text()
    assert "url: http://queuebot:8080/alerts/alertmanager" in text
    assert "send_resolved: true" in text
    assert "credentials_file:" in text  # the token is read from a file, never written here
    # the paging key too: the operators' receiver names a file, and no key
    config = yaml.safe_load(text)
    [operators] = [r for r in config["receivers"] if r["name"] == "queuebot-operators"]
    [pagerduty] = operators["pagerduty_configs"]
    assert pagerduty["routing_key_file"] == "/etc/alertmanager/paging-routing-key"
    assert not {"routing_key", "service_key"} & set(pagerduty)


def receivers_of(*labels: str, config: Path = ALERTMANAGER) -> list[str]:
    """The receivers Alertmanager sends an alert with these labels (name=value) to, in
    order, as amtool reads ``config`` (the shipped configuration by default)."""
    said = run(tool("amtool"), "config", "routes", "test", f"--config.file={config}", *labels)
    lines = [line for line in said.splitlines() if line and not line.startswith("Warning:")]
    return lines[-1].split(",")


def test_queuebots_own_alerts_go_to_the_operators_and_to_queuebot() -> None:
    """A critical alert about queuebot itself reaches people even when queuebot is what is
    broken: the operators' paging receiver first, and queuebot as well (a child route's
    match does not fall back to the parent's receiver, so queuebot's copy has its own
    route). A warning (queuebot works on meanwhile) is posted by queuebot, not paged.
    Every rule of queuebot-self is routed so, by its own labels."""
    groups = rules_by_group()
    severities = set()
    for rule in groups["queuebot-self"]:
        labels = [f"alertname={rule['alert']}", *(f"{k}={v}" for k, v in rule["labels"].items())]
        if rule["alert"] == "QueuebotQueueUnreadable":
            labels.append("queue=workers")
        severity = rule["labels"]["severity"]
        severities.add(severity)
        paged = ["queuebot-operators", "queuebot"] if severity == "critical" else ["queuebot"]
        assert receivers_of(*labels) == paged, rule["alert"]
    assert severities == {"critical", "warning"}


def test_the_queue_alerts_go_to_queuebot_only() -> None:
    groups = rules_by_group()
    for rule in groups["queuebot"]:
        labels = [f"alertname={rule['alert']}", "queue=workers"]
        labels += [f"{k}={v}" for k, v in rule["labels"].items()]
        assert receivers_of(*labels) == ["queuebot"], rule["alert"]
    # an alert of any other rule the team routes through this file: queuebot's too
    assert receivers_of("alertname=SomethingElse", "severity=critical") == ["queuebot"]
