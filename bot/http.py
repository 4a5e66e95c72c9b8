"""The HTTP app: Slack's endpoint, Alertmanager's webhook, health, readiness and
Prometheus metrics. One Starlette app, no globals.

Every endpoint sits behind the body limit (bot/body_limit.py): a body over
``[http] max_body_kb`` is refused with 413 before it is read. Slack's endpoint checks the
signature before Bolt parses anything (bot/slack/endpoint.py): unsigned is 401, signed
but malformed is 400, never 500."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST
from slack_bolt.async_app import AsyncApp
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.alertmanager import PATH as ALERTMANAGER
from bot.alertmanager import AlertmanagerEndpoint
from bot.body_limit import BodyLimit
from bot.bootstrap import App
from bot.ratelimited_log import RateLimitedLog
from bot.readiness import Readiness, SlackProblem
from bot.slack.endpoint import SlackEndpoint

log = logging.getLogger("queuebot.http")


def build_http_app(
    *,
    app: App,
    slack: AsyncApp | None,
    slack_problem: SlackProblem | None = None,
    discord_problem: Callable[[], str | None] | None = None,
    worker: Callable[[], str] | None = None,
) -> Starlette:
    """The app ``serve`` runs. ``slack`` answers /slack/events when the signing secret is
    set (without it Slack comes over Socket Mode only); ``slack_problem`` says, for
    /readyz, why Slack cannot work, if it cannot; ``worker``, how its background work
    runs."""
    refused = RateLimitedLog(log, what="refused HTTP requests")
    endpoint: SlackEndpoint | None = None
    secret = app.config.env.slack_signing_secret
    if slack is not None and secret is not None:
        endpoint = SlackEndpoint(slack, signing_secret=secret.get_secret_value(), refused=refused)
    readiness = Readiness(
        app,
        slack=slack_problem,
        discord=discord_problem,
        worker=worker,
        fresh_for=app.config.file.http.readyz_fresh_seconds,
    )
    token = app.config.env.alert_token
    alertmanager = AlertmanagerEndpoint(
        app.alerts, token=token.get_secret_value() if token else None, refused=refused
    )

    async def slack_events(request: Request) -> Response:
        if endpoint is None:
            return PlainTextResponse(
                "Slack's HTTP endpoint is off: set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET"
                if slack is None
                else "Slack's HTTP endpoint is off: SLACK_SIGNING_SECRET is not set "
                "(this queuebot takes Slack over Socket Mode)",
                status_code=503,
            )
        return await endpoint(request)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        ready, body = await readiness.check()
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_: Request) -> Response:
        # never a 500 for the estate: a queue that cannot be read shows gauges_up 0
        body = await app.metrics.exposition()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/slack/events", slack_events, methods=["POST"]),
            Route(ALERTMANAGER, alertmanager, methods=["POST"]),  # an ASGI app
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        middleware=[
            Middleware(
                BodyLimit, max_bytes=app.config.file.http.max_body_kb * 1024, refused=refused
            )
        ],
    )
