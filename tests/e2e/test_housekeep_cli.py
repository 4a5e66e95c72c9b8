"""``queuebot housekeep`` as the systemd timer runs it, a real process on the demo
estate: a dry run changes nothing, a run changes what the dry run listed, the next run
finds nothing left, and ``config check`` says what housekeeping does on each queue."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot.demo import DEMO_CONFIG
from tests.e2e.serving import demo_database
from tests.e2e.test_console import queuebot


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[dict[str, str]]:
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config))
    with demo_database("sqlite", tmp_path) as url:
        yield {"QUEUEBOT_DATABASE_URL": url, "QUEUEBOT_CONFIG": str(config)}


def listed(stdout: str) -> list[str]:
    """The statements' lines (count, what, ids) of a run's output, 'would be' removed
    (not the notes of rows left as they are)."""
    return [
        line.strip().replace("would be ", "")
        for line in stdout.splitlines()
        if re.match(r"^\s{4}\d+ ", line) and "stay failed" not in line
    ]


def test_dry_run_then_run_then_nothing_left(demo: dict[str, str], tmp_path: Path) -> None:
    dry = queuebot("housekeep", "--dry-run", cwd=tmp_path, env=demo)
    assert dry.returncode == 0, dry.stderr
    assert "housekeeping dry run" in dry.stdout
    assert "queue workers (worker_queue)" in dry.stdout
    assert "message queues are reported on, never changed" in dry.stdout
    again = queuebot("housekeep", "--dry-run", cwd=tmp_path, env=demo)
    assert listed(again.stdout) == listed(dry.stdout)  # the dry run wrote nothing

    run = queuebot("housekeep", cwd=tmp_path, env=demo)
    assert run.returncode == 0, run.stderr
    assert listed(run.stdout) == listed(dry.stdout)
    assert listed(run.stdout), "the demo estate has work for housekeeping"

    after = queuebot("housekeep", cwd=tmp_path, env=demo)
    assert after.returncode == 0, after.stderr
    assert listed(after.stdout) == []
    assert ": changed 0 row(s)" in after.stdout
    assert "stay failed: nobody can be told of them" in after.stdout  # no chat, no webhook


def test_bad_only_is_a_usage_error_and_config_check_describes_it(
    demo: dict[str, str], tmp_path: Path
) -> None:
    bad = queuebot("housekeep", "--only", "A,Z", cwd=tmp_path, env=demo)
    assert bad.returncode == 2
    assert "the parts are A, B, C, D, E, F" in bad.stderr
    check = queuebot("config", "check", cwd=tmp_path, env=demo)
    assert check.returncode == 0, check.stderr
    assert "  housekeeping: Parts A-F all run\n" in check.stdout
    assert "housekeeping: reports PROCESSING messages past the visibility timeout" in check.stdout


WEBHOOK_TOKEN = "qb-webhook-token-5f3a9c71e2"


@contextlib.contextmanager
def refusing_webhook() -> Iterator[tuple[str, list[str]]]:
    """A local webhook that answers 500 to every POST (so each run tells it again): its
    URL, which carries a token as a path segment and a query parameter, and the paths
    it was sent."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            seen.append(self.path)
            self.send_response(500)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield f"http://127.0.0.1:{port}/hook/{WEBHOOK_TOKEN}?token={WEBHOOK_TOKEN}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_no_log_level_prints_the_webhooks_secret_url(demo: dict[str, str], tmp_path: Path) -> None:
    """The HTTP client's own logger printed each POST's URL at INFO, token and all. One
    run at DEBUG shows every record INFO would, and more (each request's headers)."""
    with refusing_webhook() as (url, seen):
        run = queuebot(
            "housekeep",
            "--only",
            "B",
            cwd=tmp_path,
            env={**demo, "QUEUEBOT_LOG_LEVEL": "DEBUG", "QUEUEBOT_HOUSEKEEP_WEBHOOK_URL": url},
        )
    assert run.returncode == 0, run.stderr
    assert "the webhook answered HTTP 500" in run.stdout  # it was told, and refused
    assert seen and all(WEBHOOK_TOKEN in path for path in seen)
    assert " DEBUG " in run.stderr  # the level took: DEBUG records are printed
    assert WEBHOOK_TOKEN not in run.stdout + run.stderr
