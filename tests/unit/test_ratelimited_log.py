"""The rate-limited log (bot/ratelimited_log.py): the first lines of a window as they come,
the rest counted and reported as one line when the window ends."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.ratelimited_log import RateLimitedLog

log = logging.getLogger("test.ratelimited")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.ratelimited"]


def test_the_first_of_a_window_are_logged_and_the_rest_summed_up_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    limited = RateLimitedLog(log, what="refused requests", burst=3, window=60, clock=clock)
    with caplog.at_level(logging.INFO):
        for n in range(100):
            limited("refused request %d", n)
        assert lines(caplog) == ["refused request 0", "refused request 1", "refused request 2"]
        clock.now += 61
        limited("refused request %d", 100)
    assert lines(caplog)[3:] == [
        "refused requests: suppressed 97 more in the last 60 s",
        "refused request 100",
    ]


def test_a_quiet_window_leaves_no_summary(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(log, what="refused", burst=3, window=60, clock=clock)
    with caplog.at_level(logging.INFO):
        limited("one")
        clock.now += 120
        limited("two")
        limited.flush()
    assert lines(caplog) == ["one", "two"]


async def test_on_an_event_loop_the_summary_comes_when_the_window_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limited = RateLimitedLog(log, what="refused", burst=1, window=0.05)
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            limited("line")
        await asyncio.sleep(0.2)
    assert lines(caplog) == ["line", "refused: suppressed 4 more in the last 0.05 s"]
