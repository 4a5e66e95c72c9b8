"""The HTTP edge of the real `queuebot serve`: what strangers can send it. Bodies over the
limit are refused before they are read, on every endpoint, and a flood of them leaves the
process's memory and Slack's acks alone. Unsigned or badly signed requests get 401 and
signed but malformed ones 400, never 500, each costing at most one (rate-limited) log line.
"""

from __future__ import annotations

import select
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

import httpx
import pytest

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import signed, slash_fields
from tests.e2e.serving import Served, demo_database, running_serve
from tests.helpers.people import SLACK_ALICE
from tests.helpers.platforms import slack_env

MB = 1024 * 1024
BLOCK = b"x" * (64 * 1024)


@dataclass
class Edge:
    fake: FakeSlack
    served: Served

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.served.url)
        assert parts.hostname is not None and parts.port is not None
        return parts.hostname, parts.port

    def log_size(self) -> int:
        return len(self.served.log.read_text())

    def log_since(self, size: int) -> str:
        return self.served.log.read_text()[size:]


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    workdir = tmp_path_factory.mktemp("edge")
    with demo_database("sqlite", workdir) as db_url, FakeSlack().start() as fake:
        env = slack_env(fake)
        with running_serve(workdir, db_url, env) as served:
            yield Edge(fake, served)


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: queuebot",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def read_status(sock: socket.socket, timeout: float) -> int:
    """The status of the answer on ``sock``, waiting at most ``timeout`` seconds."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        raise AssertionError(f"no answer within {timeout}s: the server is reading on") from None
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/slack/events"), ("GET", "/healthz"), ("GET", "/readyz"), ("POST", "/nowhere")],
)
def test_a_declared_oversized_body_is_refused_before_it_is_sent(
    edge: Edge, method: str, path: str
) -> None:
    with socket.create_connection(edge.address, timeout=5) as sock:
        declared = 100 * MB
        sock.sendall(head(method, path, {"Content-Length": str(declared)}) + b"x" * 1024)
        # the other 99.99 MB are never sent: the answer must come without them
        assert read_status(sock, timeout=5) == 413


def stream(sock: socket.socket, *, total: int, chunked: bool) -> tuple[int, int | None]:
    """Send up to ``total`` bytes of body, watching between blocks for the server's answer.
    Returns how much was sent and the status of the answer (None: the connection was cut
    before one could be read)."""
    sent = 0
    try:
        while sent < total:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                return sent, read_status(sock, timeout=5)
            sock.sendall(b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK) if chunked else BLOCK)
            sent += len(BLOCK)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        return sent, read_status(sock, timeout=30)
    except (BrokenPipeError, ConnectionResetError):
        try:
            return sent, read_status(sock, timeout=1)
        except (OSError, AssertionError):
            return sent, None


def test_a_chunked_body_over_the_limit_is_cut_off(edge: Edge) -> None:
    with socket.create_connection(edge.address, timeout=5) as sock:
        sock.sendall(head("POST", "/slack/events", {"Transfer-Encoding": "chunked"}))
        sent, status = stream(sock, total=40 * MB, chunked=True)
    # socket buffers on both sides hold a few MB; the server stopped reading long before 40
    assert sent < 20 * MB, f"the server read {sent / MB:.0f} MB of an unsigned body"
    assert status in (413, None)


@dataclass
class Flood:
    """Attackers posting 100 MB unsigned bodies over and over, half declared, half chunked."""

    address: tuple[str, int]
    attackers: int = 8
    stop: threading.Event = field(default_factory=threading.Event)
    sent: list[int] = field(default_factory=list)
    answers: list[int | None] = field(default_factory=list)

    def attack(self, chunked: bool) -> None:
        framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(100 * MB)}
        while not self.stop.is_set():
            try:
                with socket.create_connection(self.address, timeout=5) as sock:
                    sock.sendall(head("POST", "/slack/events", framing))
                    sent, status = stream_until(sock, self.stop, chunked=chunked)
            except OSError:
                continue
            self.sent.append(sent)
            self.answers.append(status)

    def __enter__(self) -> Flood:
        self.threads = [
            threading.Thread(target=self.attack, args=(i % 2 == 1,), daemon=True)
            for i in range(self.attackers)
        ]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def stream_until(
    sock: socket.socket, stop: threading.Event, *, chunked: bool
) -> tuple[int, int | None]:
    sent = 0
    try:
        while sent < 100 * MB and not stop.is_set():
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                return sent, read_status(sock, timeout=5)
            sock.sendall(b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK) if chunked else BLOCK)
            sent += len(BLOCK)
    except (OSError, AssertionError):
        return sent, None
    return sent, None


def signed_help(edge: Edge, n: int) -> tuple[int, float]:
    body = urlencode(
        slash_fields(edge.fake, "help", name=f"flood-{n}", user=SLACK_ALICE, trigger=f"flood.{n}")
    )
    started = time.monotonic()
    response = web.post(
        f"{edge.served.url}/slack/events", content=body, headers=signed(body), timeout=10
    )
    return response.status_code, time.monotonic() - started


def test_a_flood_of_large_unsigned_bodies_leaves_memory_and_acks_alone(edge: Edge) -> None:
    for n in range(3):  # warm up: the first answers import and connect
        assert signed_help(edge, n)[0] == 200
    edge.fake.wait_for(lambda c: c.path == "/response/flood-2")
    calm = [signed_help(edge, n)[1] for n in range(3, 8)]
    baseline = edge.served.rss_kb()
    peak = baseline
    acks: list[tuple[int, float]] = []
    with Flood(edge.address) as flood:
        deadline = time.monotonic() + 6
        n = 100
        while time.monotonic() < deadline:
            peak = max(peak, edge.served.rss_kb())
            if n % 4 == 0:
                acks.append(signed_help(edge, n))
            n += 1
            time.sleep(0.05)
    peak = max(peak, edge.served.rss_kb())
    slowest = max(t for _, t in acks)
    print(
        f"\nRSS {baseline / 1024:.0f} MB before, {peak / 1024:.0f} MB at most during the "
        f"flood ({len(flood.sent)} unsigned posts, {sum(flood.sent) / MB:.0f} MB pushed by "
        "the attackers); "
        f"acks calm {statistics.median(calm) * 1000:.0f} ms median; during the flood "
        f"{len(acks)} acks, median {statistics.median(t for _, t in acks) * 1000:.0f} ms, "
        f"slowest {slowest * 1000:.0f} ms"
    )
    assert peak - baseline < 64 * 1024, f"RSS grew from {baseline} KB to {peak} KB"
    assert [status for status, _ in acks] == [200] * len(acks)
    assert slowest < 3.0  # Slack's deadline for the ack
    assert {a for a in flood.answers if a is not None} <= {413}


GARBAGE: list[bytes] = [
    b"\xff\xfe\x00\x01 not utf-8",
    b"payload=%7Bnot-json",
    b"payload=%5B1%2C2%5D",
    b'{"type": "block_actions", "actions": "x"',
    b'{"authorizations": "x", "team": 7}',
    b"command=%2Fqueue&text=help&user_id=U0ALICE",
    b"",
    b"%%%&&&===",
]


# signed, these are no Slack payload at all: Bolt cannot parse the first five, and the
# last two make its matching raise
MALFORMED = [
    *GARBAGE[:5],
    b'{"type": "block_actions", "actions": "x"}',
    b'{"type": "event_callback", "event": "x"}',
]


def unsigned_headers(i: int) -> dict[str, str]:
    now = str(int(time.time()))
    return [
        {},
        {"X-Slack-Request-Timestamp": "not-a-number", "X-Slack-Signature": "v0=00"},
        {"X-Slack-Request-Timestamp": now, "X-Slack-Signature": "v0=zz"},
        {"X-Slack-Request-Timestamp": now},
        {"X-Slack-Signature": "v0=" + "0" * 64},
        {"X-Slack-Request-Timestamp": "1e9", "X-Slack-Signature": "v0=" + "0" * 64},
        {"X-Slack-Request-Timestamp": "", "X-Slack-Signature": ""},
    ][i % 7]


def test_unsigned_garbage_gets_401_and_at_most_a_line_each(edge: Edge) -> None:
    start = edge.log_size()
    statuses = []
    with httpx.Client(timeout=10) as client:
        for i in range(210):
            body = GARBAGE[i % len(GARBAGE)]
            headers = {"Content-Type": "application/x-www-form-urlencoded", **unsigned_headers(i)}
            if body.startswith(b"{"):
                headers["Content-Type"] = "application/json"
            response = client.post(f"{edge.served.url}/slack/events", content=body, headers=headers)
            statuses.append(response.status_code)
    assert set(statuses) == {401}
    time.sleep(0.3)
    logged = edge.log_since(start)
    assert "Traceback" not in logged
    assert len(logged.splitlines()) <= 10, logged


def test_signed_but_malformed_bodies_get_400(edge: Edge) -> None:
    start = edge.log_size()
    with httpx.Client(timeout=10) as client:
        for body in MALFORMED * 3:
            headers = signed(body)
            if body.startswith(b"{"):
                headers["Content-Type"] = "application/json"
            response = client.post(f"{edge.served.url}/slack/events", content=body, headers=headers)
            assert response.status_code == 400, (body, response.status_code, response.text)
    time.sleep(0.3)
    logged = edge.log_since(start)
    assert "Traceback" not in logged
    assert len(logged.splitlines()) <= 3 * len(MALFORMED), logged
