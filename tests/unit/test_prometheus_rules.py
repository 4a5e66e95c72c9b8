"""The shipped Prometheus rules and Alertmanager configuration load, and the rules fire
when they should and stay quiet when they should (promtool test rules, with synthetic
series in prometheus_rules_test.yml). Needs promtool and amtool (Debian packages
prometheus and prometheus-alertmanager): skipped without them, except under
QUEUEBOT_REQUIRE_PROMTOOL=1, which CI sets after installing them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def test_the_rules_load() -> None:
    said = run(tool("promtool"), "check", "rules", str(RULES))
    assert "SUCCESS: 3 rules found" in said


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
