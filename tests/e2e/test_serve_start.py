"""`queuebot serve` as an operator meets it: the start line is true (the port answers, the
Slack setup is what it says), half a Slack setup is refused naming what is missing, and
/readyz says why it is not ready."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.ports import free_port
from tests.e2e.fake_socket_mode import FakeSocketMode
from tests.e2e.serving import ALERT_TOKEN, running_serve
from tests.e2e.test_cli import one_line
from tests.e2e.test_console import queuebot
from tests.helpers import launch
from tests.helpers.processes import clean_environ

BOT_TOKEN = "xoxb-secret-bot-token-1234"
SIGNING_SECRET = "signing-secret-5678"


# /readyz keeps what it found of columns and Slack 1 s, not 5: the tests wait less for it.
QUICK_READYZ = "\n[http]\nreadyz_fresh_seconds = 1\n"

T = TypeVar("T")


def wait_until(check: Callable[[], T | None], *, what: str, timeout: float = 20.0) -> T:
    """What ``check`` returns once it is truthy; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.1)
    return found


def _retried(db: Path, table: str) -> bool:
    """A scheduled item met the missing ``table`` on its first run and again on a retry."""
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM qb_schedule WHERE attempts >= 2 AND last_error LIKE ?",
            (f"%{table}%",),
        ).fetchone()
    return int(n) > 0


def _readyz_when(url: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    body: dict[str, Any] = web.get(f"{url}/readyz", timeout=10).json()
    return body if ready(body) else None


def test_serving_on_is_said_once_the_port_answers(tmp_path: Path, demo_db: str) -> None:
    env = clean_environ() | {
        "QUEUEBOT_DATABASE_URL": demo_db,
        "QUEUEBOT_ALERT_TOKEN": ALERT_TOKEN,
    }
    proc = launch.popen(
        [sys.executable, "-m", "bot.cli", "serve", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 30
        while "serving on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert line.startswith("queuebot serving on http://127.0.0.1:"), line
        url = line.split()[3].rstrip(":")
        assert int(url.rsplit(":", 1)[1]) > 0  # the port it bound, not the 0 it was given
        # The very next moment a client connects: no refusal, no race with the server.
        assert web.get(f"{url}/healthz", timeout=5).status_code == 200
        assert line.endswith(
            ": Slack off (no SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET or SLACK_APP_TOKEN set)\n"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_port_in_use_is_one_line_and_no_serving_on(tmp_path: Path, demo_db: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = queuebot(
            "serve",
            "--port",
            str(port),
            cwd=tmp_path,
            env={"QUEUEBOT_DATABASE_URL": demo_db, "QUEUEBOT_ALERT_TOKEN": ALERT_TOKEN},
        )
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"queuebot: cannot listen on 127.0.0.1:{port}: Address already in use; choose another "
        "--port, or stop what holds it"
    )


@pytest.mark.parametrize(
    ("slack", "said"),
    [
        (
            {"SLACK_APP_TOKEN": "xapp-1-A0-secret"},
            "SLACK_APP_TOKEN is set but SLACK_BOT_TOKEN is not set: Socket Mode needs the bot "
            "token (xoxb-) too, from the app's OAuth & Permissions page",
        ),
        (
            {"SLACK_APP_TOKEN": "xapp-1-A0-secret", "SLACK_BOT_TOKEN": ""},
            "SLACK_APP_TOKEN is set but SLACK_BOT_TOKEN is empty: Socket Mode needs the bot "
            "token (xoxb-) too, from the app's OAuth & Permissions page",
        ),
        (
            {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": ""},
            "SLACK_BOT_TOKEN is set but SLACK_SIGNING_SECRET is empty and SLACK_APP_TOKEN is "
            "not set: set SLACK_SIGNING_SECRET for Slack's HTTP requests, or SLACK_APP_TOKEN "
            "for Socket Mode, or, to only post (the buttons in queuebot's posts then cannot be "
            "clicked), set [slack] posting_only = true",
        ),
        (
            {"SLACK_SIGNING_SECRET": SIGNING_SECRET},
            "SLACK_SIGNING_SECRET is set but SLACK_BOT_TOKEN is not set: Slack needs the bot "
            "token (xoxb-) too, from the app's OAuth & Permissions page",
        ),
    ],
    ids=["app token only", "bot token empty", "signing secret empty", "signing secret only"],
)
def test_half_a_slack_setup_is_refused_naming_what_is_missing(
    tmp_path: Path, demo_db: str, slack: dict[str, str], said: str
) -> None:
    result = queuebot(
        "serve", "--port", "0", cwd=tmp_path, env={"QUEUEBOT_DATABASE_URL": demo_db, **slack}
    )
    assert result.returncode == 2
    assert one_line(result.stderr) == f"queuebot: {said}"
    assert "serving on" not in result.stderr


def test_readyz_says_which_queue_tables_are_missing(tmp_path: Path) -> None:
    """queuebot's own tables but no queue estate: not ready, naming each table, and the
    scheduler says each problem once instead of a traceback every retry."""
    db = tmp_path / "state.db"
    url = f"sqlite:///{db}"
    assert (
        queuebot("db", "upgrade", cwd=tmp_path, env={"QUEUEBOT_DATABASE_URL": url}).returncode == 0
    )
    with running_serve(tmp_path, url, {}, extra=QUICK_READYZ) as served:
        answer = web.get(f"{served.url}/readyz", timeout=10)
        assert answer.status_code == 503
        body = answer.json()
        assert body["status"] == "not ready"
        assert body["databases"] == {"state": "ok", "estate": "ok"}
        assert "table 'queue_messages' does not exist" in body["queues"]["clips"]
        assert "table 'dev_r_worker_queue' does not exist" in body["queues"]["workers"]
        assert body["problems"] == [body["queues"]["clips"], body["queues"]["workers"]]
        assert body["slack"] == "off"
        served.wait_for_log("table 'dev_r_worker_queue' does not exist")
        # the scheduler retries (after 2 s, then 4 s): once each has failed again, no more
        # lines
        for table in ("dev_r_worker_queue", "queue_messages"):
            wait_until(lambda t=table: _retried(db, t), what=f"a retry that met {table}")
        logged = served.log.read_text()
        assert logged.count("table 'dev_r_worker_queue' does not exist") == 1, logged
        assert logged.count("table 'queue_messages' does not exist") == 1, logged

        with sqlite3.connect(db) as conn:  # the operator creates the tables ...
            conn.executescript(
                (
                    Path(__file__).resolve().parents[2]
                    / "services/estate/worker_queue/ddl/sqlite.sql"
                ).read_text()
            )
        # ... and once the answer is no longer fresh (1 s here), readyz sees them
        again = wait_until(
            lambda: _readyz_when(served.url, lambda b: b["queues"]["workers"] == "ok"),
            what="readyz to see the workers' tables",
        )
        assert again["queues"]["workers"] == "ok"
        assert again["problems"] == [again["queues"]["clips"]]
    # running_serve checks the log holds no traceback


def test_readyz_says_slack_cannot_work_when_auth_test_fails(tmp_path: Path, demo_db: str) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/api/"
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_BASE_URL": nowhere,
    }
    with running_serve(tmp_path, demo_db, env) as served:
        answer = web.get(f"{served.url}/readyz", timeout=10)
        assert answer.status_code == 503
        body = answer.json()
        assert body["slack"] == "auth.test failed: Slack cannot be reached (ClientConnectorError)"
        assert body["problems"] == [f"Slack: {body['slack']}"]
        assert body["queues"] == {"clips": "ok", "workers": "ok"}
        for secret in (BOT_TOKEN, SIGNING_SECRET):
            assert secret not in answer.text and secret not in served.log.read_text()


def test_socket_mode_that_cannot_connect_at_start_says_why_and_retries(
    tmp_path: Path, demo_db: str
) -> None:
    with FakeSlack().start() as fake, FakeSocketMode().start() as ws:
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_APP_TOKEN": "xapp-1-A0QUEUEBOT-secret",
            "SLACK_API_BASE_URL": fake.api_url,
        }
        # Socket Mode off in the app
        with running_serve(tmp_path, demo_db, env, extra=QUICK_READYZ) as served:
            start = served.log.read_text().partition("queuebot serving on")[2].splitlines()[0]
            assert start.endswith(
                "Socket Mode not connected yet (Slack answered socket_mode_not_enabled; "
                "retried with backoff)"
            ), start
            answer = web.get(f"{served.url}/readyz", timeout=10)
            assert answer.status_code == 503
            assert answer.json()["slack"] == (
                "Socket Mode cannot connect: Slack answered socket_mode_not_enabled"
            )
            fake.socket_url = ws.url  # the operator turns Socket Mode on
            ws.wait_connected(timeout=15)
            # past the answer readyz keeps (1 s here)
            ready = wait_until(
                lambda: _readyz_when(served.url, lambda b: b["status"] == "ready"),
                what="readyz to see Socket Mode connected",
            )
            assert (ready["status"], ready["slack"]) == ("ready", "ok")
            said = [line for line in served.log.read_text().splitlines() if "socket_mode" in line]
            assert len(said) == 2, said  # the start line, and one error line for the refusals
            assert "Slack Socket Mode connected" in served.log.read_text()
