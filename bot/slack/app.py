"""Builds the Bolt app: the Web client pointed at SLACK_API_BASE_URL, with retries for
connection errors and 429s, and the listeners registered."""

from __future__ import annotations

import logging

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.listeners import SlackWiring, register
from services.config import EnvSettings
from services.errors import ConfigError

log = logging.getLogger("queuebot.slack")


def web_client(env: EnvSettings) -> AsyncWebClient:
    if env.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is not set")
    base = (
        env.slack_api_base_url
        if env.slack_api_base_url.endswith("/")
        else (env.slack_api_base_url + "/")
    )
    return AsyncWebClient(
        token=env.slack_bot_token.get_secret_value(),
        base_url=base,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=5),
        ],
    )


class _SameTokenNotice(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment even when given a client, then warns
    at every start that this token "will be unused". It is the client's own token: drop
    the notice so that a warning in the log always means something."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


async def verify_token_early(app: AsyncApp) -> None:
    """Call auth.test once at start, where Bolt would call it on the first request, before
    that request's ack (and once per request that arrives before the answer). A failure
    is only logged: Bolt tries again on the first request, as it would have anyway."""
    for middleware in app._async_middleware_list:  # Bolt keeps the result it caches here
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            try:
                middleware.auth_test_result = await app.client.auth_test()
            except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("Slack auth.test at start failed (%s); retried on first use", exc)


def build_slack_app(env: EnvSettings, wiring: SlackWiring) -> AsyncApp:
    if env.slack_signing_secret is None:
        raise ConfigError(
            "SLACK_SIGNING_SECRET is not set; queuebot only accepts signed requests from Slack"
        )
    client = web_client(env)
    logger = logging.getLogger("queuebot.slack")
    if not any(isinstance(f, _SameTokenNotice) for f in logger.filters):
        logger.addFilter(_SameTokenNotice())
    app = AsyncApp(
        client=client,  # carries the bot token
        signing_secret=env.slack_signing_secret.get_secret_value(),
        process_before_response=False,  # ack first, work after: never miss the 3 s deadline
        logger=logger,
    )
    register(app, wiring)
    return app
