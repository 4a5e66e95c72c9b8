"""``POST /alerts/alertmanager``: Alertmanager's webhook (version "4").

The answer says what Alertmanager should do next:
- 200 once the notification is stored (committed) (processing and chat posts come after);
- 401 without the bearer token QUEUEBOT_ALERT_TOKEN asks for (serve does not start
  without that token unless ``[alerts] allow_unauthenticated = true`` opens the path);
- 400 with the reason for a body that is not a notification (Alertmanager does not
  retry a 4xx, but sends the whole group again on its next interval);
- 413 for a body over ``[http] max_body_kb`` (the body limit refuses it unread);
- 503 when it could not be stored, so Alertmanager retries it within the same send.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import orjson
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from bot.boards import chat_configured
from bot.ratelimited_log import RateLimitedLog
from services.alerts.payload import BadPayload, parse
from services.alerts.service import AlertDesk
from services.config import Config
from services.errors import ConfigError, DatabaseUnavailable
from services.outbox import NO_PLATFORM

log = logging.getLogger("queuebot.alerts")
PATH = "/alerts/alertmanager"


class AlertmanagerEndpoint:
    """A plain ASGI app, not a Starlette endpoint: at a thousand notifications a second
    the Request and Response objects around each one cost more than the answer needs."""

    def __init__(self, desk: AlertDesk, *, token: str | None, refused: RateLimitedLog) -> None:
        self.desk = desk
        self.token = token.encode() if token else None
        self.refused = refused
        # an outage during an alert storm refuses every notification: a few lines a minute
        # say so, not one per notification
        self.unstored = RateLimitedLog(log, what="alert notifications refused with 503")

    def _authorized(self, scope: Scope) -> bool:
        if self.token is None:
            return True
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
                break
        scheme, _, credentials = given.partition(b" ")
        if scheme.lower() != b"bearer" or not credentials.strip():
            return False
        return hmac.compare_digest(credentials.strip(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._authorized(scope):
            self.refused("%s: missing or wrong bearer token (401)", PATH)
            await _answer(
                send,
                401,
                {"error": "a bearer token is required: Authorization: Bearer <token>"},
                (b"www-authenticate", b'Bearer realm="queuebot"'),
            )
            return
        body = await _body(receive)
        try:
            notification = parse(body)
        except BadPayload as exc:
            self.refused("%s: bad payload (400): %s", PATH, exc)
            await _answer(send, 400, {"error": f"not an Alertmanager notification: {exc}"})
            return
        try:
            await self.desk.receive(notification)
        except DatabaseUnavailable as exc:
            self.unstored("an alert notification could not be stored (503, retried): %s", exc)
            await _unavailable(send)
            return
        except Exception:
            log.exception("an alert notification could not be stored (503, retried)")
            await _unavailable(send)
            return
        await _answer(send, 200, STORED)


STORED = {"stored": True}


async def _body(receive: Receive) -> bytes:
    """The whole body (the body limit around the app stops a read past it)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(
    send: Send, status: int, content: dict[str, Any], *headers: tuple[bytes, bytes]
) -> None:
    body = orjson.dumps(content)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _unavailable(send: Send) -> None:
    await _answer(
        send,
        503,
        {"error": "the notification could not be stored; send it again"},
        (b"retry-after", b"1"),
    )


def unauthenticated(config: Config) -> str:
    """Why alerts are taken without a token: the variable is unset, or set to nothing."""
    if "QUEUEBOT_ALERT_TOKEN" in config.env.empty:
        return "QUEUEBOT_ALERT_TOKEN is empty (counts as not set)"
    return "QUEUEBOT_ALERT_TOKEN is not set"


OPENED = "[alerts] allow_unauthenticated = true"


def require_token(config: Config) -> None:
    """serve's start: the alert path takes only Alertmanager's bearer token, so without
    one serve does not start, unless the configuration file opens the path on purpose."""
    if config.env.alert_token is not None or config.file.alerts.allow_unauthenticated:
        return
    raise ConfigError(
        f"{unauthenticated(config)}: serve takes alerts on {PATH} only with a bearer token; "
        "set QUEUEBOT_ALERT_TOKEN (16 characters or more: `openssl rand -hex 16`) or "
        "QUEUEBOT_ALERT_TOKEN_FILE (the path of a file holding it), or, to take alerts from "
        f"anyone who reaches the port, set {OPENED} in the configuration file"
    )


def token_warning(config: Config) -> str | None:
    """For ``config check``: a warning where the alert path has no token (other commands
    need none, so it is no problem of the file): serve refuses to start, or, opened on
    purpose, takes alerts from anyone."""
    if config.env.alert_token is not None:
        return None
    if config.file.alerts.allow_unauthenticated:
        return (
            f"{OPENED}: {PATH} is unauthenticated, anyone who reaches serve's port may post "
            "alerts; set QUEUEBOT_ALERT_TOKEN (or QUEUEBOT_ALERT_TOKEN_FILE) and give "
            "Alertmanager the same token to close it"
        )
    return (
        f"{unauthenticated(config)}: `queuebot serve` will not start; set QUEUEBOT_ALERT_TOKEN "
        f"(or QUEUEBOT_ALERT_TOKEN_FILE), or {OPENED} to take alerts without a token "
        "(other commands need no token)"
    )


def guard(config: Config) -> str:
    """For /readyz: what the alert path asks of a sender."""
    if config.env.alert_token is not None:
        return "bearer token (QUEUEBOT_ALERT_TOKEN)"
    opened = f" ({OPENED})" if config.file.alerts.allow_unauthenticated else ""
    return f"unauthenticated{opened}: anyone who reaches this port may post alerts to {PATH}"


def posted_nowhere(config: Config) -> str | None:
    """What serve's start and ``config check`` say when no chat platform is configured:
    alerts are taken and stored, and go nowhere (each post is recorded as not posted)."""
    if chat_configured(config):
        return None
    return (
        f"{NO_PLATFORM}: alerts are stored but posted nowhere; set one to have them posted "
        "(`queuebot console` and the demo print the alerts their own process raises)"
    )


def describe(config: Config) -> tuple[list[str], list[str]]:
    """For ``config check`` and serve's start: how alerts come in and where they go
    (lines), and what will not work as meant (problems)."""
    alerts = config.file.alerts
    lines: list[str] = []
    problems: list[str] = []
    lines.append(
        f"alerts: POST {PATH}, "
        + (
            "QUEUEBOT_ALERT_TOKEN set (Alertmanager sends it as a bearer token)"
            if config.env.alert_token is not None
            else f"{unauthenticated(config)}: anyone who reaches the port may post alerts"
        )
    )
    routes = [
        f"{r.name} -> {', '.join(r.channels)}{' (triage)' if r.triage else ''}"
        for r in alerts.routes
    ]
    routes.append(f"FailedJobsAccumulating -> {alerts.channel} (triage)")
    routes.append(f"anything else -> {alerts.channel}")
    lines.append(f"alert routes: {'; '.join(routes)}")
    chat = config.env.slack_bot_token is not None or config.env.discord_bot_token is not None
    if chat and alerts.channel not in config.file.channels:
        problems.append(
            f"[channels.{alerts.channel}] is not set: alerts no route matches are stored but "
            f"posted nowhere; add it, or set [alerts] channel to a channel you have"
        )
    d = alerts.detectors
    on = []
    if d.queue_loss.enabled:
        on.append(f"queue loss ({d.queue_loss.minutes} min, backlog >= {d.queue_loss.min_backlog})")
    if d.dead_letter_growth.enabled:
        g = d.dead_letter_growth
        on.append(f"dead-letter growth (+{g.min_increase} in {g.window_minutes} min)")
    if d.failed_actionable.enabled:
        f = d.failed_actionable
        on.append(f"failed-actionable (> {f.threshold} for {f.minutes} min)")
    lines.append(
        f"detectors (every {alerts.sample_seconds} s): {', '.join(on) if on else 'all off'}"
    )
    return lines, problems
