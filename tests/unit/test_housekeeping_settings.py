"""The [housekeeping] section: the runbook's thresholds by default, and a clear answer
for a value that cannot be right."""

from __future__ import annotations

import pytest

from services.config import parse_file_config
from services.errors import ConfigError


def test_defaults_are_the_runbooks_thresholds() -> None:
    upkeep = parse_file_config({}, where="queuebot.toml").housekeeping
    assert upkeep.retry_backoff_minutes == [5, 15, 45]
    assert [upkeep.backoff(n) for n in (1, 2, 3, 4, 9)] == [5, 15, 45, 45, 45]
    assert (upkeep.stuck_claim_minutes, upkeep.stale_duplicate_hours) == (15, 24)
    assert (upkeep.mutex_collision_minutes, upkeep.spawn_ram_minutes) == (0, 5)
    assert (upkeep.oom_threshold, upkeep.oom_window_minutes) == (3, 30)
    assert not upkeep.periodic and upkeep.every_minutes == 10


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ({"retry_backoff_minutes": [15, 5]}, "must not shrink from one retry to the next"),
        ({"retry_backoff_minutes": []}, "housekeeping.retry_backoff_minutes"),
        ({"stuck_claim_minutes": 0}, "housekeeping.stuck_claim_minutes = 0"),
        ({"oom_threshold": -1}, "housekeeping.oom_threshold = -1"),
        ({"every_minute": 5}, "housekeeping.every_minute = 5: unknown key"),
    ],
)
def test_a_bad_value_is_refused_with_where_and_why(section: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_file_config({"housekeeping": section}, where="queuebot.toml")
    assert said in info.value.message
    assert info.value.message.startswith("queuebot.toml: housekeeping")
