"""A lasting configuration problem is said again at growing intervals, with a count."""

from __future__ import annotations

import logging

import pytest

from services.errors import ConfigError
from services.known_problems import KnownProblems


def test_a_lasting_problem_is_said_again_at_growing_intervals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    times = iter([0.0, 10, 59, 60, 61, 179, 181, 200, 201])
    problems = KnownProblems(
        logging.getLogger("queuebot.test"), "the loop", clock=lambda: next(times)
    )
    missing = ConfigError("table 'jobs' does not exist")
    with caplog.at_level(logging.INFO, logger="queuebot.test"):
        for _ in range(8):  # said at 0, then after a minute, then after two more
            problems.report(missing, doing="a pass")
        problems.report(ConfigError("another problem"), doing="a pass")
    assert [r.getMessage() for r in caplog.records] == [
        "the loop: a pass failed: table 'jobs' does not exist (retried with backoff; said "
        "again only if it lasts)",
        "the loop: still failing (3 time(s) since last said): table 'jobs' does not exist",
        "the loop: still failing (3 time(s) since last said): table 'jobs' does not exist",
        "the loop: a pass failed: another problem (retried with backoff; said again only if "
        "it lasts)",
    ]
