"""Bolt's error handler (bot/slack/app.py: bolt_errors): a signed request Bolt cannot
handle is a 400 and one log line, one no listener takes a 404 and one line, and a listener
that fails after its ack keeps its traceback."""

from __future__ import annotations

import logging

import pytest
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.ratelimited_log import RateLimitedLog
from bot.slack.app import bolt_errors

log = logging.getLogger("test.bolt_errors")


async def test_a_request_no_listener_takes_is_a_404_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    request = AsyncBoltRequest(body="command=%2Fnothing&text=x", headers={})
    error = BoltUnhandledRequestError(request=request, current_response=None)
    with caplog.at_level(logging.INFO):
        answer = await bolt_errors(RateLimitedLog(log, what="refused"))(
            error=error, body=request.body, response=BoltResponse(status=404)
        )
    assert answer is not None and answer.status == 404
    assert [r.getMessage() for r in caplog.records] == [
        "no listener takes a signed Slack request (command '/nothing'): answered 404"
    ]


async def test_what_bolt_raises_before_the_ack_is_a_400_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        answer = await bolt_errors(RateLimitedLog(log, what="refused"))(
            error=TypeError("string indices must be integers"),
            body={"type": "block_actions", "actions": "x"},
            response=BoltResponse(status=500),
        )
    assert answer is not None and answer.status == 400
    assert [(r.getMessage(), r.exc_info) for r in caplog.records] == [
        (
            "a signed Slack request Bolt could not handle (TypeError "
            "'string indices must be integers'): answered 400",
            None,
        )
    ]


async def test_a_listener_failing_after_its_ack_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        answer = await bolt_errors(RateLimitedLog(log, what="refused"))(
            error=RuntimeError("a bug"), body={}, response=None
        )
    assert answer is None
    (record,) = caplog.records
    assert record.getMessage() == "a Slack listener failed after its ack"
    assert record.exc_info is not None and record.levelno == logging.ERROR
