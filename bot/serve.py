"""``queuebot serve``: one asyncio process running the HTTP app and, when configured,
Slack Socket Mode."""

from __future__ import annotations

import logging
import socket
import sys

import uvicorn
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

from bot.bootstrap import App, build_app, running_scheduler
from bot.http import build_http_app
from bot.slack.app import build_slack_app, web_client
from bot.slack.listeners import SlackWiring
from bot.slack.notifier import SlackNotifier
from services.config import Config
from services.notify import FanoutNotifier, Notifier

log = logging.getLogger("queuebot")


def _notifier(config: Config) -> Notifier | None:
    """Where plans and alerts post: every platform that is configured."""
    if config.env.slack_bot_token is None:
        return None
    channels = {name: c.slack for name, c in config.file.channels.items() if c.slack}
    return FanoutNotifier([("slack", SlackNotifier(web_client(config.env), channels))])


async def slack_app_for(app: App, wiring: SlackWiring) -> AsyncApp | None:
    env = app.config.env
    if env.slack_bot_token is None and env.slack_signing_secret is None:
        return None
    return await build_slack_app(env, wiring)


async def serve(config: Config, *, host: str, port: int, sock: socket.socket | None = None) -> int:
    app = await build_app(config, notifier=_notifier(config))
    socket_mode: AsyncSocketModeHandler | None = None
    wiring = SlackWiring(
        router=app.router,
        directory=app.directory,
        ledger=app.ledger,
        slack_api_base_url=config.env.slack_api_base_url,
    )
    try:
        slack = await slack_app_for(app, wiring)
        http = build_http_app(app=app, slack=slack)
        server = uvicorn.Server(
            uvicorn.Config(
                http, host=host, port=port, lifespan="off", log_level="warning", access_log=False
            )
        )
        if slack is not None and config.env.slack_app_token is not None:
            socket_mode = AsyncSocketModeHandler(
                slack, config.env.slack_app_token.get_secret_value()
            )
            await socket_mode.connect_async()  # type: ignore[no-untyped-call]
        where = f"{sock.getsockname()}" if sock else f"http://{host}:{port}"
        print(
            f"queuebot serving on {where}: Slack HTTP "
            f"{'on at /slack/events' if slack else 'off (no SLACK_* variables)'}, "
            f"Socket Mode {'on' if socket_mode else 'off'}",
            file=sys.stderr,
            flush=True,
        )
        async with running_scheduler(app):
            await server.serve(sockets=[sock] if sock else None)
        return 0
    finally:
        # Stop taking envelopes first: one acked while answers drain would be lost.
        if socket_mode is not None:
            await socket_mode.close_async()  # type: ignore[no-untyped-call]
        await wiring.drain()
        await app.close()
