"""`queuebot serve` on PostgreSQL answers Alertmanager in one process and processes and
posts in a worker process it starts itself: what the front acknowledged is posted by the
worker, /metrics counts the worker's posts, a worker that dies is started again and
posts what was stored meanwhile, and a stopped serve leaves no worker behind."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from testkit import web
from testkit.fake_slack import Call, FakeSlack
from tests.e2e.serving import Served, serve_posting_to
from tests.integration.alerting import alert, notification

pytestmark = pytest.mark.postgres

TOKEN = "qb-alert-token-for-the-worker-tests"


def serving(fake: FakeSlack, tmp_path: Path) -> contextlib.AbstractContextManager[Served]:
    return serve_posting_to(fake, tmp_path, "postgres", TOKEN, post_interval=0)


def worker_of(served: Served) -> int:
    """The pid of serve's worker process (the child running multiprocessing's spawn)."""
    deadline = time.monotonic() + 30
    while True:
        for task in Path(f"/proc/{served.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                with Path(f"/proc/{child}/cmdline").open("rb") as cmdline:
                    if b"spawn_main" in cmdline.read():
                        return int(child)
        assert time.monotonic() < deadline, "serve started no worker"
        time.sleep(0.1)


def send(served: Served, name: str) -> httpx.Response:
    group = {"alertname": name, "queue": "clips"}
    body = notification(group=group, alerts=[alert(f"{len(name):04x}beef", labels=group)])
    return web.post(
        f"{served.url}/alerts/alertmanager",
        json=body,
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )


def roots(fake: FakeSlack) -> list[Call]:
    return [c for c in fake.recorded("/api/chat.postMessage") if not c.body.get("thread_ts")]


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.1)


def worker_said(served: Served) -> str:
    """What /readyz says of the worker (a worker down or restarted leaves it ready)."""
    answer = web.get(f"{served.url}/readyz", timeout=10)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["worker"])


def posted(fake: FakeSlack, name: str) -> bool:
    return any(name in str(c.body.get("blocks")) for c in roots(fake))


def test_the_worker_posts_what_the_front_stored_and_metrics_count_it(
    fake: FakeSlack, tmp_path: Path
) -> None:
    with serving(fake, tmp_path) as served:
        worker = worker_of(served)
        assert worker != served.pid
        assert send(served, "QueueStuck").status_code == 200
        eventually(lambda: posted(fake, "QueueStuck"))
        eventually(
            lambda: (
                'queuebot_alert_posts_total{kind="root"} 1.0'
                in web.get(f"{served.url}/metrics", timeout=10).text
            )
        )
    eventually(lambda: not Path(f"/proc/{worker}").exists(), 15)  # stopped with serve


def test_a_worker_that_dies_is_started_again_and_nothing_stored_is_lost(
    fake: FakeSlack, tmp_path: Path
) -> None:
    with serving(fake, tmp_path) as served:
        first = worker_of(served)
        assert worker_said(served) == f"running (pid {first})"
        os.kill(first, signal.SIGKILL)
        # the front still stores and acknowledges while no worker runs
        assert send(served, "DiskFilling").status_code == 200
        served.wait_for_log("starting it again", timeout=15)
        eventually(lambda: posted(fake, "DiskFilling"), 60)
        second = worker_of(served)
        assert second != first
        assert len(roots(fake)) == 1
        # /readyz says the worker runs again and that it ended once, killed; still ready
        said = worker_said(served)
        assert said.startswith(f"running (pid {second}); ended 1 time(s) in the last 10 ")
        assert said.endswith("with exit code -9"), said
