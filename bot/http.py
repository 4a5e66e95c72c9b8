"""The HTTP app: Slack's endpoint, health and readiness. One Starlette app, no globals.

Every endpoint sits behind the body limit (bot/body_limit.py): a body over
``[http] max_body_kb`` is refused with 413 before it is read. Slack's endpoint checks the
signature before Bolt parses anything (bot/slack/endpoint.py): unsigned is 401, signed
but malformed is 400, never 500."""

from __future__ import annotations

import asyncio
import logging

import sqlalchemy as sa
from slack_bolt.async_app import AsyncApp
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.body_limit import BodyLimit
from bot.bootstrap import App
from bot.ratelimited_log import RateLimitedLog
from bot.slack.endpoint import SlackEndpoint
from services.errors import ConfigError

log = logging.getLogger("queuebot.http")
READY_TIMEOUT = 2.0


def build_http_app(*, app: App, slack: AsyncApp | None) -> Starlette:
    refused = RateLimitedLog(log, what="refused HTTP requests")
    endpoint: SlackEndpoint | None = None
    if slack is not None:
        secret = app.config.env.slack_signing_secret
        if secret is None:
            raise ConfigError("SLACK_SIGNING_SECRET is not set; it checks every Slack request")
        endpoint = SlackEndpoint(slack, signing_secret=secret.get_secret_value(), refused=refused)

    async def slack_events(request: Request) -> Response:
        if endpoint is None:
            return PlainTextResponse(
                "Slack is not configured: set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET",
                status_code=503,
            )
        return await endpoint(request)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        checks: dict[str, str] = {}
        engines = {"state": app.state_engine, "estate": app.estate.engine}
        for name, engine in engines.items():
            try:
                async with asyncio.timeout(READY_TIMEOUT), engine.connect() as conn:
                    await conn.execute(sa.text("SELECT 1"))
                checks[name] = "ok"
            except Exception as exc:  # any failure means not ready; say which, not why
                log.warning("readiness: %s database unreachable: %s", name, type(exc).__name__)
                checks[name] = "unreachable"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "databases": checks},
            status_code=200 if ready else 503,
        )

    return Starlette(
        routes=[
            Route("/slack/events", slack_events, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ],
        middleware=[
            Middleware(
                BodyLimit, max_bytes=app.config.file.http.max_body_kb * 1024, refused=refused
            )
        ],
    )
