"""The webhook's parser reads what Alertmanager 0.25 really sent (the recorded bodies in
tests/fixtures/alertmanager/) and every RFC 3339 form it may send."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.alerts.payload import BadPayload, parse, parse_time

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alertmanager"


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_bodies_parse(path: Path) -> None:
    notification = parse(path.read_bytes())
    assert notification.version == "4" and notification.alerts
    for alert in notification.alerts:
        assert alert.startsAt is not None and alert.startsAt.tzinfo is UTC
        assert (alert.endsAt is None) == (alert.status == "firing")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30T12:00:00Z", datetime(2026, 11, 30, 12, tzinfo=UTC)),
        ("2026-11-30T12:00:00.1Z", datetime(2026, 11, 30, 12, 0, 0, 100000, tzinfo=UTC)),
        ("2026-11-30T12:00:00.123456789Z", datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-30T14:00:00.5+02:00", datetime(2026, 11, 30, 12, 0, 0, 500000, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", None),
    ],
)
def test_times_with_0_to_9_fractional_digits(text: str, expected: datetime | None) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["2026-11-30", "2026-11-30T12:00:00", "2026-11-30T25:00:00Z",
                                  "2026-11-30T12:00:00.1234567890Z"])  # fmt: skip
def test_other_times_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"RFC 3339|not a real time"):
        parse_time(text)


def test_unknown_fields_are_ignored_and_a_wrong_type_is_named() -> None:
    body = (FIXTURES / "firing.json").read_text()
    assert parse(body.replace('"version"', '"notification_reason":"x","version"').encode())
    with pytest.raises(BadPayload, match="truncatedAlerts"):
        parse(body.replace('"truncatedAlerts":0', '"truncatedAlerts":"0"').encode())


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("9999-12-31T23:59:59-23:59", "after 9999-12-31T23:59:59.999999Z in UTC"),
        ("9999-12-31T23:59:59.5-00:01", "after 9999-12-31T23:59:59.999999Z in UTC"),
        ("2026-11-30T12:00:00+24:00", "offset out of range"),
        ("2026-11-30T12:00:00-05:60", "offset out of range"),
    ],
)
def test_times_without_a_utc_time_to_keep_are_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_time(text)
    assert parse_time("9999-12-31T23:59:59+23:59") is not None  # the same day, earlier in UTC


@pytest.mark.parametrize("text", ["0000-01-01T00:00:00Z", "0000-12-31T23:59:59.5+01:00"])
def test_a_time_in_year_0000_is_refused_saying_the_years_kept(text: str) -> None:
    """RFC 3339's four digits allow year 0000; no time queuebot keeps is in it (only year
    0001's first instant has a meaning: Go's zero time, no time)."""
    with pytest.raises(ValueError, match="is in year 0000: queuebot keeps times of the years"):
        parse_time(text)
    body = (FIXTURES / "firing.json").read_text()
    starts = re.search(r'"startsAt":"([^"]+)"', body)
    assert starts is not None
    with pytest.raises(BadPayload, match=r"alerts\[0\]\.startsAt: '0000-"):
        parse(body.replace(starts.group(1), text, 1).encode())
