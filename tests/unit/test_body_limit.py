"""The body limit (bot/body_limit.py), at the ASGI level: a body over the limit is refused
with 413 before it is read (declared), or as soon as the read passes the limit (chunked or
lying), and an answer given without reading a declared body closes the connection."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import Message, Receive, Scope, Send

from bot.body_limit import BodyLimit
from bot.ratelimited_log import RateLimitedLog

LIMIT = 16 * 1024
log = logging.getLogger("test.body_limit")


def scope(headers: dict[str, str], method: str = "POST") -> Scope:
    return {
        "type": "http",
        "method": method,
        "path": "/slack/events",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("203.0.113.9", 40000),
    }


class Body:
    """The server's side of receive(): the body in pieces, counting how many were asked."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self.pieces = pieces
        self.asked = 0

    async def __call__(self) -> Message:
        self.asked += 1
        piece = next(self.pieces, None)
        if piece is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": piece, "more_body": True}


def endless(size: int = 4096) -> Iterator[bytes]:
    while True:
        yield b"x" * size


class Sent:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.messages[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = await Request(scope, receive).body()
    await PlainTextResponse(f"read {len(body)}")(scope, receive, send)


async def ignore_body(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("ok")(scope, receive, send)


def limited(app: object = echo) -> BodyLimit:
    return BodyLimit(app, max_bytes=LIMIT, refused=RateLimitedLog(log, what="refused"))  # type: ignore[arg-type]


async def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read() -> None:
    body, sent = Body(endless()), Sent()
    await limited()(scope({"Content-Length": str(100 * 1024 * 1024)}), body, sent)
    assert sent.status == 413
    assert body.asked == 0
    assert sent.headers[b"connection"] == b"close"
    assert sent.body == b"request body too large: the limit is 16 KB\n"


async def test_a_chunked_body_is_cut_off_at_the_read_that_passes_the_limit() -> None:
    body, sent = Body(endless(4096)), Sent()
    await limited()(scope({"Transfer-Encoding": "chunked"}), body, sent)
    assert sent.status == 413
    assert body.asked == LIMIT // 4096 + 1
    assert sent.headers[b"connection"] == b"close"


async def test_a_body_longer_than_it_said_is_cut_off_too() -> None:
    body, sent = Body(endless(4096)), Sent()
    await limited()(scope({"Content-Length": "10"}), body, sent)
    assert sent.status == 413 and body.asked == LIMIT // 4096 + 1


async def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    body, sent = Body(iter([b"a" * 10_000, b"b" * (LIMIT - 10_000)])), Sent()
    await limited()(scope({"Content-Length": str(LIMIT)}), body, sent)
    assert sent.status == 200 and sent.body == f"read {LIMIT}".encode()
    assert b"connection" not in sent.headers  # read to its end: the connection may be kept


async def test_an_answer_that_leaves_a_declared_body_unread_closes_the_connection() -> None:
    sent = Sent()
    await limited(ignore_body)(scope({"Content-Length": "100"}, "GET"), Body(endless()), sent)
    assert sent.status == 200 and sent.headers[b"connection"] == b"close"
    bodiless = Sent()
    await limited(ignore_body)(scope({}, "GET"), Body(endless()), bodiless)
    assert bodiless.status == 200 and b"connection" not in bodiless.headers


@pytest.mark.parametrize("value", ["-1", "ten", "1e9", "9" * 30, ""])
async def test_a_content_length_that_is_no_length_is_refused_with_400(value: str) -> None:
    body, sent = Body(endless()), Sent()
    await limited()(scope({"Content-Length": value}), body, sent)
    assert sent.status == 400 and body.asked == 0


async def test_each_refusal_is_one_line_and_a_flood_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = limited()
    with caplog.at_level(logging.WARNING, logger="test.body_limit"):
        for _ in range(50):
            await guard(scope({"Content-Length": "999999"}), Body(endless()), Sent())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10
    assert lines[0] == (
        "refused POST '/slack/events' from 203.0.113.9 with 413: "
        "request body too large: the limit is 16 KB"
    )
    guard.refused.flush()
    assert caplog.records[-1].getMessage() == "refused: suppressed 40 more in the last 60 s"


async def test_other_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    await limited(app)({"type": "lifespan"}, Body(endless()), Sent())
    assert seen == ["lifespan"]
