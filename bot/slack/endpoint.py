"""``POST /slack/events``: queuebot's edge in front of Bolt.

Anyone can reach this endpoint, so what a stranger sends must cost little and never
surprise: a request that is not signed by Slack (or whose timestamp is not a number, or
is stale) is answered 401 before its body is even parsed; a signed one Bolt cannot parse
is answered 400. Either costs one log line at most, rate-limited. Only then does Bolt
dispatch the request (it checks the signature again, which is harmless).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from slack_bolt.adapter.starlette.async_handler import (
    to_async_bolt_request,
    to_starlette_response,
)
from slack_bolt.async_app import AsyncApp
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from bot.ratelimited_log import RateLimitedLog
from bot.slack.signature import refusal


class SlackEndpoint:
    def __init__(
        self,
        slack: AsyncApp,
        *,
        signing_secret: str,
        refused: RateLimitedLog,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.slack = slack
        self.secret = signing_secret.encode()
        self.refused = refused
        self.clock = clock

    async def __call__(self, request: Request) -> Response:
        # Read within the body limit: a body over it never gets here (bot/body_limit.py).
        body = await request.body()
        client = request.client.host if request.client else "unknown"
        why = refusal(self.secret, request.headers, body, now=self.clock())
        if why is not None:
            self.refused("refused a request to /slack/events from %s with 401: %s", client, why)
            return PlainTextResponse("not signed by Slack\n", status_code=401)
        try:
            bolt_request = to_async_bolt_request(request, body)
            # Bolt turns what its middleware raises into an answer (bot/slack/app.py:
            # bolt_errors), but on some shapes (an empty "actions") building the error
            # handler's arguments raises again, out of dispatch.
            bolt_response = await self.slack.async_dispatch(bolt_request)
        except Exception as exc:  # the signed body is of a shape Bolt cannot take
            self.refused(
                "refused a signed request to /slack/events from %s with 400: %s %s",
                client,
                type(exc).__name__,
                _short(exc),
            )
            return PlainTextResponse("malformed Slack request\n", status_code=400)
        return to_starlette_response(bolt_response)


def _short(exc: BaseException) -> str:
    """The exception's message, bounded and on one line (it may quote the sender's data)."""
    return repr(str(exc)[:200])
