"""Builds the Bolt app: the Web client pointed at SLACK_API_BASE_URL, with retries for
connection errors and 429s, the bot's identity asked of Slack once, and the listeners
registered."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.ratelimited_log import RateLimitedLog
from bot.slack.listeners import SlackWiring, register
from bot.slack.render import blocks, fallback_text
from commands.reply import Reply
from services.config import EnvSettings
from services.errors import ConfigError

log = logging.getLogger("queuebot.slack")


class PooledWebClient(AsyncWebClient):
    """A Web API client that keeps its connections open between calls.

    Given no session, slack_sdk opens an aiohttp session, so a new TCP connection and TLS
    handshake with Slack, for every call, and closes it after. This client opens one
    session per event loop at its first call (``pool``) and keeps it, so posts reuse
    kept-alive connections; ``aclose`` closes it. Bolt's per-request copies of the app's
    client share the session the app's client holds when they are made."""

    _loop: asyncio.AbstractEventLoop | None = None

    def pool(self) -> aiohttp.ClientSession:
        """The session of the running loop, opened on first use (a session belongs to
        the loop it was opened in)."""
        loop = asyncio.get_running_loop()
        if self.session is None or self.session.closed or self._loop is not loop:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
            self._loop = loop
        return self.session

    async def api_call(self, *args: Any, **kwargs: Any) -> Any:
        self.pool()
        return await super().api_call(*args, **kwargs)

    async def aclose(self) -> None:
        session = self.session
        if session is not None and not session.closed and self._loop is asyncio.get_running_loop():
            await session.close()


def web_client(env: EnvSettings, *, with_token: bool = True) -> PooledWebClient:
    if env.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is not set")
    base = (
        env.slack_api_base_url
        if env.slack_api_base_url.endswith("/")
        else (env.slack_api_base_url + "/")
    )
    return PooledWebClient(
        token=env.slack_bot_token.get_secret_value() if with_token else None,
        base_url=base,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=5),
        ],
    )


SLACK_FAILURES = (SlackApiError, aiohttp.ClientError, TimeoutError)


def slack_failure(exc: BaseException) -> str:
    """Why a call to Slack failed, in words that carry no token: Slack's error code
    (``invalid_auth``, ``socket_mode_not_enabled``), or that it could not be reached."""
    if isinstance(exc, SlackApiError):
        return f"Slack answered {exc.response.get('error') or 'an error'}"
    return f"Slack cannot be reached ({type(exc).__name__})"


class BotIdentity(AsyncAuthorize):
    """Who the bot is, from Slack's auth.test, asked once and kept: Bolt's ``authorize``,
    which hands it to each request. Left to itself, Bolt would call auth.test inside the
    first request, before that request's ack (and once per request that arrives before
    the answer)."""

    def __init__(self, client: PooledWebClient) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._client = client  # carries the bot token
        self._result: AuthorizeResult | None = None
        self._asking = asyncio.Lock()
        self._problem: str | None = None
        self._asking_again: asyncio.Task[None] | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def post_in_channel(self, channel: str, user: str, reply: Reply) -> None:
        """An answer Slack no longer takes at its response_url (a process finished the
        work long after the ack), posted in the channel, mentioning the person. An answer
        meant only for them is not shown to everyone: they are told to ask again."""
        mention = f"<@{user}>"
        if reply.ephemeral or reply.error:
            text = (
                f"{mention} your answer was ready after Slack stopped taking answers to "
                "that command; ask again to see it."
            )
            body: dict[str, Any] = {"text": text}
        else:
            body = {
                "text": f"{mention} {fallback_text(reply.message)}",
                "blocks": blocks(reply.message),
            }
        try:
            await self._client.chat_postMessage(channel=channel, **body)
        except SLACK_FAILURES as exc:
            log.warning("could not answer in channel %s: %s", channel, slack_failure(exc))

    async def post_to_person(self, user: str, reply: Reply) -> None:
        """An answer to a click in the App Home, which has no response_url: in the
        person's Messages tab with the app (only they see it)."""
        try:
            await self._client.chat_postMessage(
                channel=user, text=fallback_text(reply.message), blocks=blocks(reply.message)
            )
        except SLACK_FAILURES as exc:
            log.warning("could not answer %s in the Messages tab: %s", user, slack_failure(exc))

    async def open_view(self, trigger_id: str, view: dict[str, Any]) -> str | None:
        """Open a modal at ``trigger_id`` (a form): None once Slack opened it, else Slack's
        error code (``expired_trigger_id`` past its 3 s) or why Slack could not be asked."""
        try:
            await self._client.views_open(trigger_id=trigger_id, view=view)
        except SlackApiError as exc:
            return str(exc.response.get("error") or "an error")
        except SLACK_FAILURES as exc:
            return slack_failure(exc)
        return None

    async def check(self) -> None:
        """At start. A failure is only logged: the first request asks again."""
        try:
            await self.result()
        except SLACK_FAILURES as exc:
            log.warning(
                "Slack auth.test at start failed (%s); retried on first use", slack_failure(exc)
            )

    async def problem(self) -> str | None:
        """Why the bot cannot work with Slack (auth.test failed), or None once Slack has
        said who the bot is. Until then each call asks Slack again in the background (one
        ask at a time), so readiness recovers by itself and never waits on Slack."""
        if self._result is not None:
            return None
        if self._asking_again is None or self._asking_again.done():
            self._asking_again = asyncio.create_task(self._ask_again())
        return self._problem or "auth.test has not answered yet"

    async def _ask_again(self) -> None:
        with contextlib.suppress(*SLACK_FAILURES):
            await self.result()

    async def result(self) -> AuthorizeResult:
        async with self._asking:  # requests that arrive together wait for one answer
            if self._result is None:
                try:
                    answer = await self._client.auth_test()
                except SLACK_FAILURES as exc:
                    self._problem = f"auth.test failed: {slack_failure(exc)}"
                    raise
                self._result = AuthorizeResult.from_auth_test_response(
                    auth_test_response=answer,
                    bot_token=self._client.token,
                    bot_scopes=answer.headers.get("x-oauth-scopes"),
                )
            return self._result

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        """Per request. When auth.test still fails, the request is refused (Bolt logs that
        no AuthorizeResult was found and answers with its "not authorized" message) and
        the next one asks again."""
        try:
            return await self.result()
        except SLACK_FAILURES as exc:
            log.error("Slack auth.test failed (%s); this request is refused", slack_failure(exc))
            return None


@contextlib.contextmanager
def _bot_token_variable_hidden() -> Iterator[None]:
    """AsyncApp's constructor falls back to the SLACK_BOT_TOKEN variable when it is given
    no ``token``, and then warns at every start that this token is unused (``client`` was
    given) or ignored (``authorize`` was given). Bolt has no public switch for that
    fallback, so the variable is taken out of the environment while the constructor runs
    and put back after: queuebot has read it already (EnvSettings) and hands it to Bolt
    through ``authorize``. The constructor is synchronous, so no other coroutine sees the
    gap. Bolt 1.30 reads the variable nowhere else; pyproject.toml pins that version."""
    saved = os.environ.pop("SLACK_BOT_TOKEN", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["SLACK_BOT_TOKEN"] = saved


def bolt_errors(refused: RateLimitedLog) -> Callable[..., Awaitable[BoltResponse | None]]:
    """Bolt's error handler (its public ``app.error``), for signed requests Bolt cannot
    handle. Left to itself Bolt answers 500 and logs a traceback when a payload of an
    unexpected shape makes its middleware or matching raise, and logs several lines of
    advice for a request no listener takes. Here the first is a 400 and the second a
    404, each one rate-limited line. A listener that fails after its ack is queuebot's
    own bug and keeps its traceback."""

    async def on_error(
        error: Exception, body: Any, response: BoltResponse | None
    ) -> BoltResponse | None:
        if isinstance(error, BoltUnhandledRequestError):
            refused("no listener takes a signed Slack request (%s): answered 404", _what(body))
            return BoltResponse(status=404, body="no listener for this request\n")
        if response is None:  # Bolt passes none once the request was acknowledged
            log.error("a Slack listener failed after its ack", exc_info=error)
            return None
        refused(
            "a signed Slack request Bolt could not handle (%s %r): answered 400",
            type(error).__name__,
            str(error)[:200],
        )
        return BoltResponse(status=400, body="malformed Slack request\n")

    return on_error


def _what(body: Any) -> str:
    """A few words naming a request, for the log: its command, or its type."""
    if isinstance(body, dict):
        for key in ("command", "type"):
            if isinstance(body.get(key), str):
                return f"{key} {body[key][:40]!r}"
    return "no command or type"


async def build_slack_app(
    env: EnvSettings, wiring: SlackWiring, *, identity: BotIdentity | None = None
) -> AsyncApp:
    """The Bolt app, after asking Slack once who the bot is (see BotIdentity). Slack's HTTP
    requests need the signing secret; Socket Mode (SLACK_APP_TOKEN) needs none: its
    envelopes arrive over a socket the app token opened, and Bolt checks no signature."""
    secret = env.slack_signing_secret
    if secret is None and env.slack_app_token is None:
        raise ConfigError(
            "SLACK_SIGNING_SECRET is not set; queuebot only accepts signed requests from Slack"
        )
    identity = identity or BotIdentity(web_client(env))
    await identity.check()
    if isinstance(wiring, SlackWiring):  # a test builds the app with no wiring
        wiring.open_view = identity.open_view  # forms open with the bot's token
    client = web_client(env, with_token=False)
    client.pool()  # opened now, so that every per-request copy Bolt makes shares it
    with _bot_token_variable_hidden():
        app = AsyncApp(
            # Bolt copies this client for each request and sets the token authorize gives;
            # a token here as well would be one more that Bolt warns it ignores
            client=client,
            # Bolt's annotation says a callable returning AuthorizeResult; it takes an
            # AsyncAuthorize too, whose __call__ may return None (the request is refused)
            authorize=identity,  # type: ignore[arg-type]
            # "" rather than None, or Bolt would read SLACK_SIGNING_SECRET itself; without a
            # secret serve answers /slack/events 503 and Slack comes over the socket only
            signing_secret=secret.get_secret_value() if secret is not None else "",
            process_before_response=False,  # ack first, work after: never miss the 3 s deadline
            logger=logging.getLogger("queuebot.slack"),
            raise_error_for_unhandled_request=True,  # to bolt_errors: one line, not advice
        )
    app.error(bolt_errors(RateLimitedLog(log, what="Slack requests refused")))
    register(app, wiring)
    return app
