"""Without Prometheus or Alertmanager the alerting tests skip, saying what is missing,
except under QUEUEBOT_REQUIRE_ALERTING=1 (CI), where they fail."""

from __future__ import annotations

import pytest

from tests.e2e import alerting_stack


def test_missing_programs_skip_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alerting_stack, "PROMETHEUS_BIN", "/nonexistent/prometheus")
    monkeypatch.setattr(alerting_stack, "REQUIRE_ALERTING", False)
    with pytest.raises(pytest.skip.Exception, match=r"/nonexistent/prometheus.* not installed"):
        alerting_stack.need_alerting()
    monkeypatch.setattr(alerting_stack, "REQUIRE_ALERTING", True)
    with pytest.raises(pytest.fail.Exception, match="QUEUEBOT_REQUIRE_ALERTING=1 but"):
        alerting_stack.need_alerting()


def test_durations_are_read_as_the_programs_read_them() -> None:
    assert alerting_stack.duration_seconds("1s") == 1
    assert alerting_stack.duration_seconds("500ms") == 0.5
    assert alerting_stack.duration_seconds("1m30s") == 90
    for bad in ("", "1", "1.5s", "s", "1s "):
        with pytest.raises(ValueError, match="not a Prometheus duration"):
            alerting_stack.duration_seconds(bad)
