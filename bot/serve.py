"""``queuebot serve``: the HTTP app and, when configured, Slack Socket Mode, in one
asyncio process; alert processing, the outbox relays and the scheduler run beside it, in
a worker process serve starts itself on PostgreSQL (bot/worker.py), in the same process
on SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import sys
from typing import TYPE_CHECKING

import uvicorn
from slack_bolt.async_app import AsyncApp

from bot.alertmanager import OPENED, posted_nowhere, require_token
from bot.alertmanager import PATH as ALERTMANAGER_PATH
from bot.boards import board_surfaces
from bot.bootstrap import App, build_app
from bot.discord.setup import discord_link, discord_notifier
from bot.heap import settle_heap
from bot.http import build_http_app
from bot.http_bounds import Bounds, bounded_protocol, room_for
from bot.ratelimited_log import RateLimitedLog
from bot.readers import attach_slack_reader
from bot.readiness import SlackProblem
from bot.recovery import Platform, Recovery
from bot.slack.app import (
    SLACK_FAILURES,
    BotIdentity,
    PooledWebClient,
    build_slack_app,
    slack_failure,
    web_client,
)
from bot.slack.listeners import SlackWiring
from bot.slack.listeners import resume as slack_resume
from bot.slack.setup import SlackSetup, slack_setup
from bot.worker import Background, background, chat_notifier, chat_reach
from services.config import Config
from services.errors import ConfigError
from services.ledger import DeliveryLedger
from services.notify import FanoutNotifier

if TYPE_CHECKING:  # imported where used: only a serve configured for them pays for them
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    from bot.discord.client import DiscordLink

log = logging.getLogger("queuebot")
MAX_RECONNECT_WAIT = 300.0  # seconds between Socket Mode dials, at most


def listen(host: str, port: int) -> socket.socket:
    """Bind and listen before saying "serving on": a client that reads it can connect at
    once (uvicorn serves this socket). A port in use is one line, not a traceback."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}: {exc.strerror}; check --host") from exc
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port, or stop "
            "what holds it"
        ) from exc
    return sock


def _where(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class SocketModeLink:
    """Socket Mode's connection. Dialled once before serve says it is serving; when Slack
    refuses to open one (Socket Mode off in the app, a revoked app token, Slack
    unreachable) that is one line, dialled again with backoff, and /readyz says why until
    it holds. Once connected, the Socket Mode client keeps the connection by itself."""

    def __init__(self, handler: AsyncSocketModeHandler, app_token: str) -> None:
        self.handler = handler
        self.app_token = app_token
        self.failure: str | None = "not connected yet"
        self._retrying: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        if await self._dial():
            return
        log.error("Slack Socket Mode cannot connect: %s; retried with backoff", self.failure)
        self._retrying = asyncio.create_task(self._redial())

    async def _dial(self) -> bool:
        # The address is asked for here, not by the Socket Mode client: its connect()
        # retries a refusal forever, logging a traceback every 10 s, and never returns.
        client = self.handler.client
        try:
            opened = await client.web_client.apps_connections_open(app_token=self.app_token)
        except SLACK_FAILURES as exc:
            self.failure = slack_failure(exc)
            return False
        client.wss_uri = str(opened["url"])
        await self.handler.connect_async()  # type: ignore[no-untyped-call]
        self.failure = None
        return True

    async def _redial(self) -> None:
        wait = 2.0
        while True:
            await asyncio.sleep(wait)
            said = self.failure
            if await self._dial():
                log.info("Slack Socket Mode connected")
                return
            if self.failure != said:
                log.error("Slack Socket Mode cannot connect: %s; retried", self.failure)
            wait = min(wait * 2, MAX_RECONNECT_WAIT)

    async def problem(self) -> str | None:
        if self.failure is not None:
            return f"Socket Mode cannot connect: {self.failure}"
        if not await self.handler.client.is_connected():
            return "Socket Mode is reconnecting"
        return None

    async def close(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retrying
        await self.handler.close_async()  # type: ignore[no-untyped-call]


def _slack_wiring(config: Config, app: App) -> SlackWiring:
    """Slack's side of the delivery protocol; user groups granting roles, rotas and teams
    are read with the bot token, and read again when Slack says one changed."""
    attach_slack_reader(config, app)
    return SlackWiring(
        router=app.router,
        directory=app.directory,
        ledger=app.ledger,
        metrics=app.metrics,
        slack_api_base_url=config.env.slack_api_base_url,
        membership=app.standings.membership if app.standings else None,
        boards=app.boards,
    )


async def serve(config: Config, *, host: str, port: int, sock: socket.socket | None = None) -> int:
    setup = _refused_or_slack_setup(config)  # before anything else
    listener = sock or listen(host, port)
    link: SocketModeLink | None = None
    discord = None
    try:
        discord_posts = discord_notifier(config)
        posts = chat_notifier(config, discord_posts)
        app = await build_app(
            config, notifier=posts, reach=chat_reach(posts), surfaces=board_surfaces(config, posts)
        )
        wiring = _slack_wiring(config, app)
        try:
            identity: BotIdentity | None = None
            slack = None
            if setup.http or setup.socket:
                identity = BotIdentity(web_client(config.env))
                _answers_through(wiring, identity)
                slack = await build_slack_app(config.env, wiring, identity=identity)
            if slack is not None and setup.socket and config.env.slack_app_token is not None:
                from slack_bolt.adapter.socket_mode.async_handler import (
                    AsyncSocketModeHandler,
                )

                app_token = config.env.slack_app_token.get_secret_value()
                link = SocketModeLink(AsyncSocketModeHandler(slack, app_token), app_token)
                await link.connect()
            discord = discord_link(config, app)
            if discord is not None:
                if discord_posts is not None:
                    discord_posts.attach(discord.client)
                discord.start()
            recovery = _recovery(app.ledger, wiring if slack is not None else None, discord)
            work = Background()
            http = build_http_app(
                app=app,
                slack=slack,
                slack_problem=_slack_problem(identity, link) if identity else None,
                discord_problem=discord.problem if discord is not None else None,
                worker=work,
            )
            server = uvicorn.Server(
                uvicorn.Config(
                    http,
                    http=_bounded(config),
                    lifespan="off",
                    log_level="warning",
                    access_log=False,
                )
            )
            print(
                f"queuebot serving on {_where(listener)}: "
                f"{setup.describe(socket_failure=link.failure if link else None)}"
                f"{', Discord on' if discord is not None else ''}",
                file=sys.stderr,
                flush=True,
            )
            _alert_warnings(config)
            settle_heap()
            async with recovery.running(), background(config, app, work):
                await server.serve(sockets=[listener])
            return 0
        finally:
            # Stop taking envelopes first: one acked while answers drain would be lost.
            if link is not None:
                await link.close()
            if discord is not None:
                await discord.close()
            try:
                await wiring.drain()
                await app.close()
            finally:
                await _close_chat(identity, slack, posts)
    finally:
        listener.close()


def _answers_through(wiring: SlackWiring, identity: BotIdentity) -> None:
    """Answers Slack no longer takes at a response_url go through the Web API: in the
    channel past a response_url's life, in the Messages tab for a click in the App Home."""
    wiring.in_channel = identity.post_in_channel
    wiring.to_person = identity.post_to_person


def _bounded(config: Config) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with [http]'s bounds on slow and surplus clients, and room
    in the process for that many connections (bot/http_bounds.py)."""
    settings = config.file.http
    room_for(settings.max_connections)
    return bounded_protocol(
        Bounds(
            header_timeout=settings.header_timeout_seconds,
            body_timeout=settings.body_timeout_seconds,
            max_connections=settings.max_connections,
        ),
        RateLimitedLog(logging.getLogger("queuebot.http"), what="slow or surplus connections"),
    )


def _refused_or_slack_setup(config: Config) -> SlackSetup:
    """Half a Slack setup is refused, and so is an alert path with no token that the
    configuration did not open on purpose; else the ways Slack reaches this process."""
    setup = slack_setup(config.env, posting_only=config.file.slack.posting_only)
    require_token(config)
    return setup


def _alert_warnings(config: Config) -> None:
    """At start: alerts that will go nowhere, and alerts anyone may post."""
    nowhere = posted_nowhere(config)
    if nowhere is not None:
        log.warning("%s", nowhere)
    if config.env.alert_token is None:  # only as opened on purpose (require_token)
        log.warning(
            "%s and QUEUEBOT_ALERT_TOKEN is not set: anyone who reaches this port may post "
            "alerts to %s",
            OPENED,
            ALERTMANAGER_PATH,
        )


def _recovery(
    ledger: DeliveryLedger, slack: SlackWiring | None, discord: DiscordLink | None
) -> Recovery:
    """Finishing, for each platform this process speaks, what a dead process acknowledged."""
    platforms: list[Platform] = []
    if slack is not None:
        platforms.append(Platform("slack:", functools.partial(slack_resume, slack)))
    if discord is not None:
        from bot.discord.interactions import resume as discord_resume

        wiring = discord.client.wiring
        platforms.append(
            Platform(
                "discord:",
                functools.partial(discord_resume, wiring),
                ready=lambda: discord.problem() is None,
            )
        )
    return Recovery(ledger, platforms)


async def _close_chat(
    identity: BotIdentity | None, slack: AsyncApp | None, posts: FanoutNotifier | None
) -> None:
    """Close the kept-alive connections to Slack and Discord's REST login."""
    if identity is not None:
        await identity.aclose()
    if slack is not None and isinstance(slack.client, PooledWebClient):
        await slack.client.aclose()
    if posts is not None:
        await posts.close()


def _slack_problem(identity: BotIdentity, link: SocketModeLink | None) -> SlackProblem:
    """For /readyz: why Slack cannot work, if it cannot."""

    async def problem() -> str | None:
        said = await identity.problem()
        if said is None and link is not None:
            said = await link.problem()
        return said

    return problem
