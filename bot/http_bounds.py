"""What one client may hold of serve's HTTP port: uvicorn's HTTP/1.1 protocol with bounds.

uvicorn closes a kept-alive connection that stays idle, but waits as long as a client
likes for a request's line, headers and body: a client that sends half a request and
then a header line now and then (slow-loris), or a body a few bytes at a time, holds
its connection (a socket, a file descriptor, a parser) for ever, and enough of them
exhaust the process. Here:

* the request line and headers must arrive within ``header_timeout`` of the connection
  (or, on a kept-alive connection, of the next request's first byte), and be no longer
  than ``MAX_HEAD`` (64 KB; uvicorn's parser keeps whatever comes until the headers end,
  so a fast client could otherwise send hundreds of MB within the timeout): a longer one
  is answered ``431`` and closed;
* the body, within ``body_timeout`` of the headers' end. Both are totals, not the time
  between two reads, so a trickle does not restart them;
* a client past either bound is answered ``408 Request Timeout`` (when no answer has
  started) and its connection closed: the endpoint reading its body sees the client
  gone, as for any disconnect;
* at most ``max_connections`` connections are open at once: the one past it is answered
  ``503`` with ``Connection: close`` as soon as it connects, and closed, never queued.

Once a request is read whole, the time its endpoint takes is not bounded here. Each
refusal and close is one log line at most, rate-limited (bot/ratelimited_log.py).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bot.ratelimited_log import RateLimitedLog

log = logging.getLogger("queuebot.http")
SPARE_DESCRIPTORS = 256  # besides the connections: the database pools, Slack, Discord, logs
MAX_HEAD = 64 * 1024  # bytes of request line and headers at most (Slack's are about 1 KB)


@dataclass(frozen=True)
class Bounds:
    header_timeout: float
    body_timeout: float
    max_connections: int


def _answer(status: bytes, text: str, *extra: bytes) -> bytes:
    body = text.encode() + b"\n"
    head = [
        b"HTTP/1.1 " + status,
        b"content-type: text/plain; charset=utf-8",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
        *extra,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def bounded_protocol(bounds: Bounds, refused: RateLimitedLog) -> type[asyncio.Protocol]:
    """The protocol class uvicorn builds for each connection (``uvicorn.Config(http=)``)."""
    too_slow = {
        "headers": _answer(
            b"408 Request Timeout",
            f"the request line and headers must arrive within {bounds.header_timeout:g} s",
        ),
        "body": _answer(
            b"408 Request Timeout",
            f"the request body must arrive within {bounds.body_timeout:g} s of its headers",
        ),
    }
    too_long = _answer(
        b"431 Request Header Fields Too Large",
        f"the request line and headers must be at most {MAX_HEAD // 1024} KB",
    )
    busy = _answer(
        b"503 Service Unavailable",
        "queuebot has as many connections open as it takes; try again shortly",
        b"retry-after: 1",
    )

    class Bounded(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _turned_away = False
        _in_head = False  # reading a request line and headers
        _head_bytes = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > bounds.max_connections:
                self._turned_away = True
                refused(
                    "refused a connection from %s with 503: %d open already, "
                    "[http] max_connections = %d",
                    self._peer(),
                    len(self.connections) - 1,
                    bounds.max_connections,
                )
                transport.write(busy)
                transport.close()
                return
            self._arm("headers", bounds.header_timeout)

        def data_received(self, data: bytes) -> None:
            if self._turned_away:
                return
            if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
                # the first bytes of the next request on a kept-alive connection
                self._arm("headers", bounds.header_timeout)
            super().data_received(data)
            if self._in_head and not self.transport.is_closing():
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD:
                    self._disarm()
                    refused(
                        "closed a connection from %s with 431: request line and headers over %d KB",
                        self._peer(),
                        MAX_HEAD // 1024,
                    )
                    self.transport.write(too_long)
                    self.transport.close()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._arm("body", bounds.body_timeout)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, part: str, seconds: float) -> None:
            self._disarm()
            self._in_head = part == "headers"
            self._head_bytes = 0
            self._deadline = self.loop.call_later(seconds, self._too_slow, part)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self, part: str) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            refused(
                "closed a connection from %s with 408: its request %s did not arrive within %g s",
                self._peer(),
                "line and headers" if part == "headers" else "body",
                bounds.header_timeout if part == "headers" else bounds.body_timeout,
            )
            answering = (
                self.cycle is not None
                and self.cycle.response_started
                and not self.cycle.response_complete
            )
            if not answering:  # nothing of an answer on the wire: say why it is closed
                self.transport.write(too_slow[part])
            if self.cycle is not None:
                self.cycle.keep_alive = False
            self.transport.close()

        def _peer(self) -> str:
            return self.client[0] if self.client else "unknown"

    return Bounded


def room_for(connections: int) -> None:
    """Make sure the process may open that many connections besides its own: the soft
    limit on open files is raised toward the hard one where it is lower, and where even
    the hard one is too low that is said once (past it, accepting a connection fails for
    every client, not only for the one too many)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + SPARE_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "[http] max_connections = %d needs about %d open files, and this process may "
            "open %d: lower max_connections, or raise the limit (LimitNOFILE= in systemd, "
            "ulimit -n)",
            connections,
            wanted,
            soft,
        )
