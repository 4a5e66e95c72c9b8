"""A request body over the limit is refused before it is read: a pure ASGI middleware
around the whole HTTP app, so every endpoint has the same guard.

* A ``Content-Length`` over the limit is answered 413 at once; the app never runs and not
  one byte of the body is asked for.
* A body without a length (chunked), or longer than it said, is counted as the app reads
  it; the read that passes the limit raises ``BodyTooLarge`` inside the app, and this
  middleware answers 413 (when no answer has started yet).
* Either way, and whenever the app answers without reading a body the request declared,
  the answer carries ``Connection: close``: the server then drops the connection instead
  of reading (and discarding) the rest.

Nothing is buffered here: the app asks for the body piece by piece, as the server has it.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.ratelimited_log import RateLimitedLog

_CLOSE = (b"connection", b"close")


class BodyTooLarge(Exception):
    """Raised inside the app by the read that passes the limit."""


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int, refused: RateLimitedLog) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.refused = refused  # one rate-limited line per refused request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: int | None = None
        chunked = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit() or len(value) > 18:
                    await self._refuse(scope, send, 400, "bad Content-Length")
                    return
                declared = max(declared or 0, int(value))
            elif name == b"transfer-encoding":
                chunked = True
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send, 413, self._too_large())
            return

        received = 0
        read_all = not chunked and not declared  # no body to read
        answering = False

        async def counted() -> Message:
            nonlocal received, read_all
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge
                read_all = not message.get("more_body", False)
            return message

        async def answer(message: Message) -> None:
            nonlocal answering
            if message["type"] == "http.response.start":
                answering = True
                if not read_all:
                    message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
            await send(message)

        try:
            await self.app(scope, counted, answer)
        except ClientDisconnect:
            return  # the client went away mid-body: there is nobody to answer, nothing to log
        except BodyTooLarge:
            if answering:
                return  # the answer is on its way; the server closes the connection
            await self._refuse(scope, send, 413, self._too_large())

    def _too_large(self) -> str:
        return f"request body too large: the limit is {self.max_bytes // 1024} KB"

    async def _refuse(self, scope: Scope, send: Send, status: int, reason: str) -> None:
        client = scope.get("client")
        self.refused(
            "refused %s %r from %s with %d: %s",
            scope.get("method", "?"),
            scope.get("path", "?"),
            client[0] if client else "unknown",
            status,
            reason,
        )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), _CLOSE],
            }
        )
        await send({"type": "http.response.body", "body": reason.encode() + b"\n"})
