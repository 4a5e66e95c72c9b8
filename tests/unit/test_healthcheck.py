"""The image's health check: it finds `queuebot serve` among the processes, probes the
/healthz of the address on its command line, and says why when it is unhealthy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot import healthcheck


def _proc(tmp_path: Path, *argvs: list[str]) -> Path:
    """A /proc with one process per command line (process ids 1, 2, ...)."""
    tmp_path.mkdir(exist_ok=True)
    for pid, argv in enumerate(argvs, 1):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "self").mkdir()  # not a process id: passed over
    return tmp_path


@pytest.fixture
def server() -> Iterator[tuple[int, list[int]]]:
    """A local HTTP server answering /healthz with the status first in the list."""
    status = [200]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], status
    httpd.shutdown()
    httpd.server_close()


def test_the_address_comes_from_serves_command_line() -> None:
    serve = ["/opt/queuebot/bin/python", "/opt/queuebot/bin/queuebot", "serve"]
    assert healthcheck.address(serve) == ("127.0.0.1", 8080)
    assert healthcheck.address([*serve, "--host", "0.0.0.0", "--port", "8080"]) == (
        "127.0.0.1",
        8080,
    )
    assert healthcheck.address([*serve, "--port=9000", "--host=::"]) == ("::1", 9000)
    assert healthcheck.address([*serve, "--host", "10.0.0.5", "--port", "1"]) == ("10.0.0.5", 1)


def test_only_queuebot_serve_is_taken_for_serve() -> None:
    assert healthcheck.is_serve(["/opt/queuebot/bin/python", "/opt/queuebot/bin/queuebot", "serve"])
    assert healthcheck.is_serve(["python", "-m", "bot.cli", "--config", "x.toml", "serve"])
    assert not healthcheck.is_serve(["/opt/queuebot/bin/queuebot", "db", "upgrade"])
    assert not healthcheck.is_serve(["python", "-c", "from multiprocessing.spawn import x"])
    assert not healthcheck.is_serve(["serve"])


def test_healthy_when_serves_port_answers_200(
    tmp_path: Path, server: tuple[int, list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    port, status = server
    proc = _proc(
        tmp_path,
        ["/usr/bin/tini", "--", "queuebot", "serve", "--host", "0.0.0.0", "--port", str(port)],
        ["python", "-c", "from multiprocessing.spawn import spawn_main"],
    )
    assert healthcheck.main(proc) == 0
    status[0] = 503
    assert healthcheck.main(proc) == 1
    assert f"http://127.0.0.1:{port}/healthz answered 503" in capsys.readouterr().err


def test_unhealthy_without_serve_or_without_an_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert healthcheck.main(_proc(tmp_path / "a", ["queuebot", "console"])) == 1
    assert "no queuebot serve process" in capsys.readouterr().err
    assert healthcheck.main(_proc(tmp_path / "b", ["queuebot", "serve", "--port", "x"])) == 1
    assert "--port is not a number" in capsys.readouterr().err
    # a port nothing listens on: refused, said with the address
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_address[1]
    assert healthcheck.main(_proc(tmp_path / "c", ["queuebot", "serve", "--port", str(port)])) == 1
    assert f"http://127.0.0.1:{port}/healthz:" in capsys.readouterr().err
