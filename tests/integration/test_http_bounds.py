"""serve's HTTP protocol (bot/http_bounds.py) under uvicorn, in process, with bounds of a
second: what a client that is slow, or one too many, sees on the wire; and that an
endpoint taking its time, or a kept-alive client coming back, is not cut short. The
end-to-end figures with the defaults are in tests/reliability/test_slow_clients.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bot.http_bounds import Bounds, bounded_protocol
from bot.ratelimited_log import RateLimitedLog

BOUND = 1.0
SLACK = 0.6


async def echo(request: Request) -> Response:
    body = await request.body()
    return PlainTextResponse(f"read {len(body)} bytes")


async def slow(_: Request) -> Response:
    await asyncio.sleep(BOUND * 2.5)  # longer than either bound: the endpoint's own time
    return PlainTextResponse("took its time")


@contextlib.asynccontextmanager
async def serving(max_connections: int = 100) -> AsyncIterator[int]:
    app = Starlette(
        routes=[Route("/echo", echo, methods=["POST"]), Route("/slow", slow, methods=["GET"])]
    )
    protocol = bounded_protocol(
        Bounds(header_timeout=BOUND, body_timeout=BOUND, max_connections=max_connections),
        RateLimitedLog(logging.getLogger("queuebot.http"), what="test"),
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    server = uvicorn.Server(
        uvicorn.Config(app, http=protocol, lifespan="off", log_level="warning", access_log=False)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task
        sock.close()


async def read_until_closed(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    """What the server sent until it closed the connection, and when it closed it."""
    started = time.monotonic()
    data = b""
    while True:
        chunk = await asyncio.wait_for(reader.read(4096), timeout=within)
        if not chunk:
            return data, time.monotonic() - started
        data += chunk


async def test_half_a_request_is_answered_408_and_closed_within_the_bound() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: q\r\n")  # no end of headers
        data, took = await read_until_closed(reader, BOUND + 3)
        writer.close()
    assert data.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), data
    assert b"connection: close" in data
    assert b"headers must arrive within 1 s" in data
    assert BOUND - 0.1 <= took <= BOUND + SLACK


async def test_a_trickling_body_is_cut_at_the_bound_however_often_bytes_come() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: q\r\nContent-Length: 100\r\n\r\n")
        started = time.monotonic()

        async def trickle() -> None:  # a byte every 0.2 s: never idle for long
            with contextlib.suppress(ConnectionError):
                for _ in range(50):
                    await asyncio.sleep(0.2)
                    writer.write(b"x")
                    await writer.drain()

        dripping = asyncio.create_task(trickle())
        data, _ = await read_until_closed(reader, BOUND + 3)
        took = time.monotonic() - started
        dripping.cancel()
        writer.close()
    assert data.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), data
    assert b"body must arrive within 1 s" in data
    assert BOUND - 0.1 <= took <= BOUND + SLACK


async def test_a_header_over_64_kb_is_answered_431_without_waiting_for_its_end() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: q\r\nX-Big: " + b"a" * 100_000)
        data, took = await read_until_closed(reader, 2)
        writer.close()
    assert data.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), data
    assert b"at most 64 KB" in data
    assert took < 0.5


async def test_a_kept_alive_client_is_served_again_and_bounded_again() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # whole requests, a pause longer than the bound between them
            writer.write(b"POST /echo HTTP/1.1\r\nHost: q\r\nContent-Length: 3\r\n\r\nabc")
            head = await asyncio.wait_for(reader.readuntil(b"read 3 bytes"), timeout=2)
            assert head.startswith(b"HTTP/1.1 200 OK")
            await asyncio.sleep(BOUND + 0.3)
        writer.write(b"POST /echo HTTP/1")  # then half of the next request
        data, took = await read_until_closed(reader, BOUND + 3)
        writer.close()
    assert data.startswith(b"HTTP/1.1 408"), data
    assert took <= BOUND + SLACK


async def test_an_endpoint_that_takes_its_time_is_not_cut_short() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: q\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"took its time"), timeout=BOUND * 5)
        writer.close()
    assert head.startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize("limit", [16])
async def test_a_connection_past_the_limit_is_refused_at_once(limit: int) -> None:
    async with serving(max_connections=limit) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(limit)]
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        data, took = await read_until_closed(reader, 2)
        writer.close()
        for _, w in held[:1]:  # one of them goes: a new client gets in again
            w.close()
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: q\r\nContent-Length: 2\r\n\r\nok")
        again = await asyncio.wait_for(reader.readuntil(b"read 2 bytes"), timeout=2)
        writer.close()
        for _, w in held[1:]:
            w.close()
    assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), data
    assert b"retry-after: 1" in data and b"connection: close" in data
    assert took < 0.5
    assert again.startswith(b"HTTP/1.1 200 OK")
