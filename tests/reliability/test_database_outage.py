"""A database outage while `queuebot serve` runs: every command answers that the database
is unavailable and nothing was changed, /readyz says 503, the log holds one line per
command and no traceback, and service resumes by itself when the database is back.

PostgreSQL is reached through a TCP proxy the test can cut (testkit/tcp_proxy.py): every
connection closed and new ones refused, as in a failover. A database that stops answering
instead is test_silent_database.py's."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.tcp_proxy import TcpProxy
from tests.e2e.serving import ALERT_AUTH, demo_database, running_serve
from tests.e2e.slack_stack import Stack, answer_to, texts
from tests.e2e.test_slack import requests_count, slash
from tests.helpers.platforms import slack_env
from tests.integration.alerting import alert, notification


@contextlib.contextmanager
def proxied(db_url: str) -> Iterator[tuple[TcpProxy, str]]:
    url = make_url(db_url)
    with TcpProxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        yield proxy, url.set(port=proxy.port).render_as_string(hide_password=False)


@pytest.fixture
def outage_stack(tmp_path: Path) -> Iterator[tuple[Stack, TcpProxy]]:
    with (
        demo_database("postgres", tmp_path) as db_url,
        proxied(db_url) as (proxy, through),
        FakeSlack().start() as fake,
    ):
        env = slack_env(fake)
        with running_serve(tmp_path, through, env) as served:
            yield Stack(fake, served, db_url), proxy


def ready(stack: Stack) -> int:
    return web.get(f"{stack.url}/readyz", timeout=10).status_code


def _background_met_the_outage(log: str) -> bool:
    paused = all(f"{loop} paused: " in log for loop in ("the scheduler", "the outbox relay"))
    return paused or "background worker stopped: cannot reach queuebot's database" in log


def test_an_outage_is_answered_clearly_and_service_resumes_by_itself(
    outage_stack: tuple[Stack, TcpProxy],
) -> None:
    stack, proxy = outage_stack
    (failed,) = stack.sql("SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    assert ready(stack) == 200
    before = requests_count(stack)

    proxy.cut()
    # The background work meets the outage too: its scheduler and outbox relay each say
    # once that they paused, or (when the cut finds it starting) the worker says it cannot
    # reach the database and is started again.
    deadline = time.monotonic() + 15
    while not _background_met_the_outage(stack.served.log.read_text()):
        assert time.monotonic() < deadline, stack.served.log.read_text()[-3000:]
        time.sleep(0.05)
    commands = [
        "triage --queue workers",
        f'requeue {failed} --queue workers --reason "during the outage"',
        "pending",
    ]
    for text in commands:
        response, name, _ = slash(stack, text)
        assert response.status_code == 200  # acknowledged: Slack never sees an error
        reply = texts(answer_to(stack.fake, name))
        assert "Database unavailable" in reply, reply
        assert "nothing was changed" in reply, reply
        assert "unexpected error" not in reply
    assert ready(stack) == 503
    # an alert storm during the outage: each notification refused 503 (Alertmanager
    # retries), and the log says so a few times a minute, not once per notification
    with httpx.Client(base_url=stack.url, headers=ALERT_AUTH, timeout=10) as client:
        for n in range(300):
            group = {"alertname": f"Storm{n}"}
            storm = notification(group=group, alerts=[alert(f"{n:016x}", labels=group)])
            assert client.post("/alerts/alertmanager", json=storm).status_code == 503
    log = stack.served.log.read_text()
    assert log.count("alert notification could not be stored") <= 10, log[-3000:]
    assert "Traceback" not in log
    assert log.count("Database unavailable") == 0  # the log says it in its own words:
    assert sum("is unavailable" in line for line in log.splitlines()) <= len(commands) + 2

    proxy.forward()
    deadline = time.monotonic() + 30
    while ready(stack) != 200:
        assert time.monotonic() < deadline, "serve did not recover"
        time.sleep(0.5)
    _, name, _ = slash(stack, f'requeue {failed} --queue workers --reason "after the outage"')
    reply = texts(answer_to(stack.fake, name))
    assert "waiting for approval" in reply, reply
    assert requests_count(stack) == before + 1  # the outage's request was never made
