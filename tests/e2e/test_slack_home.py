"""The Slack App Home end to end: the real `queuebot serve` (on PostgreSQL its background
worker publishes), Slack's signed events and clicks, and the Web API pointed at the local
fake Slack, which keeps each person's published Home tab and refuses one beyond Block
Kit's limits. A person who opens their App Home sees their board; a request asked on
Slack appears in an approver's home within 5 s; approved with the home's own button
(answered in the Messages tab), it is gone within 5 s. serve killed right after a change
shows it once started again (the process that made a change and died before its refresh
is tests/integration/test_board_homes.py's, deterministically)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import event_callback, send_event, signed, slash_fields
from tests.e2e.serving import Served, demo_database, running_serve
from tests.helpers.database import query
from tests.helpers.people import SLACK_ALICE, SLACK_BOB
from tests.helpers.platforms import home_click, slack_env

WITHIN = 5.0  # seconds from a change to the home that shows it


@dataclass
class Stack:
    fake: FakeSlack
    served: Served
    workdir: Path
    db_url: str


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    with (
        demo_database(request.param, tmp_path) as db_url,
        FakeSlack().start() as fake,
        running_serve(tmp_path, db_url, slack_env(fake)) as served,
    ):
        yield Stack(fake, served, tmp_path, db_url)


def home_text(fake: FakeSlack, user: str) -> str:
    view = fake.homes.get(user)
    return json.dumps(view["blocks"]) if view else ""


def until(what: str, check: object, timeout: float = WITHIN) -> float:
    """Seconds until ``check()`` holds (``timeout`` at most)."""
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def shown_first(fake: FakeSlack) -> None:
    """Until bob's home is first published: serve's background worker (PostgreSQL) may
    still be starting, so this waits longer than a change's refresh may take."""
    until("bob's home is published", lambda: "Waiting for your" in home_text(fake, SLACK_BOB), 30)


def open_home(url: str, user: str) -> None:
    event = {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"}
    assert send_event(url, event_callback(event)).status_code == 200


_asked: set[str] = set()


def requeue(stack: Stack, user: str) -> str:
    """``user`` asks, on Slack, to requeue a failed row of workers; the request's ref."""
    fake, url = stack.fake, stack.served.url
    failed = [
        str(i)
        for (i,) in query(
            stack.db_url, "SELECT id FROM dev_r_worker_queue WHERE status = 'failed' ORDER BY id"
        )
        if str(i) not in _asked
    ]
    _asked.add(failed[0])
    name = f"rq-{time.monotonic_ns()}"
    text = f"requeue {failed[0]} --queue workers --reason fixed"
    body = urlencode(slash_fields(fake, text, name=name, user=user, trigger=f"1.{name}"))
    sent = web.post(f"{url}/slack/events", content=body, headers=signed(body), timeout=10)
    assert sent.status_code == 200
    answer = fake.wait_for(lambda c: c.path == f"/response/{name}")[0]
    found = re.search(r"CR-\d+", json.dumps(answer.body))
    assert found, answer.body
    return found.group(0)


def test_a_request_reaches_an_approvers_home_and_leaves_it_once_approved(stack: Stack) -> None:
    fake, url = stack.fake, stack.served.url
    open_home(url, SLACK_BOB)
    shown_first(fake)

    ref = requeue(stack, SLACK_ALICE)
    took = until(f"{ref} in bob's home", lambda: ref in home_text(fake, SLACK_BOB))
    assert took < WITHIN
    number = ref.removeprefix("CR-")

    payload = urlencode({"payload": json.dumps(home_click(f"cr:approve:{number}", user=SLACK_BOB))})
    clicked = web.post(f"{url}/slack/events", content=payload, headers=signed(payload), timeout=10)
    assert clicked.status_code == 200
    told = fake.wait_for(
        lambda c: c.path == "/api/chat.postMessage" and c.body.get("channel") == SLACK_BOB
    )[0]
    assert ref in json.dumps(told.body) and "approved" in json.dumps(told.body).lower()
    until(f"{ref} gone from bob's home", lambda: ref not in home_text(fake, SLACK_BOB))
    assert not fake.recorded("/api/views.publish#invalid")


def test_a_change_made_just_before_serve_dies_is_shown_after_it_starts_again(
    stack: Stack,
) -> None:
    fake, url = stack.fake, stack.served.url
    open_home(url, SLACK_BOB)
    shown_first(fake)
    ref = requeue(stack, SLACK_ALICE)
    os.kill(stack.served.pid, signal.SIGKILL)  # its refresh is due within two seconds
    with running_serve(stack.workdir, stack.db_url, slack_env(fake)) as again:
        assert again.pid != stack.served.pid
        until(f"{ref} in bob's home", lambda: ref in home_text(fake, SLACK_BOB), timeout=15)
