"""Slack over Socket Mode, end to end: the real `queuebot serve` with SLACK_APP_TOKEN set
asks the fake Web API for a socket URL, dials the fake Socket Mode server, and answers
envelopes delivered over it, the way Slack delivers them to an app with no public URL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import slash_fields
from tests.e2e.fake_socket_mode import FakeSocketMode
from tests.e2e.serving import Served, demo_database, running_serve
from tests.e2e.slack_stack import answer_to, texts
from tests.helpers.database import query
from tests.helpers.people import SLACK_ALICE, SLACK_BOB


@dataclass
class Socket:
    fake: FakeSlack
    socket: FakeSocketMode
    db_url: str
    served: Served

    def sql(self, statement: str) -> list[Any]:
        return query(self.db_url, statement)


@pytest.fixture(scope="module")
def socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Socket]:
    workdir = tmp_path_factory.mktemp("socket")
    with (
        demo_database("sqlite", workdir) as db_url,
        FakeSlack().start() as fake,
        FakeSocketMode().start() as ws,
    ):
        fake.socket_url = ws.url
        env = {
            "SLACK_BOT_TOKEN": "xoxb-fake-token",
            "SLACK_APP_TOKEN": "xapp-1-A0QUEUEBOT-fake",
            "SLACK_API_BASE_URL": fake.api_url,
        }
        with running_serve(workdir, db_url, env) as served:
            ws.wait_connected()
            yield Socket(fake, ws, db_url, served)


_counter = iter(range(1, 1_000_000))


def command(s: Socket, text: str, *, user: str = SLACK_ALICE) -> str:
    """Deliver `/queue <text>` over the socket; the name of its response_url."""
    n = next(_counter)
    name = f"sock{n}-{time.monotonic_ns()}"
    payload = slash_fields(s.fake, text, name=name, user=user, trigger=f"{n}.{name}")
    envelope = s.socket.send("slash_commands", payload)
    assert s.socket.wait_ack(envelope) == {"envelope_id": envelope}
    return name


def test_serve_dials_the_socket_it_was_handed(socket: Socket) -> None:
    opened = socket.fake.recorded("/api/apps.connections.open")
    assert opened and socket.socket.connections >= 1


def test_socket_mode_needs_no_signing_secret(socket: Socket) -> None:
    """The bot token and the app-level token are all Socket Mode needs: envelopes come
    over the socket the app token opened, and nothing signs them. The HTTP endpoint,
    which would need the signing secret, says it is off and why."""
    start = socket.served.log.read_text().partition("queuebot serving on")[2].splitlines()[0]
    assert start.endswith(
        ": Slack HTTP off (SLACK_SIGNING_SECRET not set; Socket Mode needs none), Socket Mode on"
    )
    off = web.post(f"{socket.served.url}/slack/events", content=b"command=/queue")
    assert off.status_code == 503
    assert (
        "SLACK_SIGNING_SECRET is not set (this queuebot takes Slack over Socket Mode)" in off.text
    )
    ready = web.get(f"{socket.served.url}/readyz").json()
    assert (ready["status"], ready["slack"]) == ("ready", "ok")


def test_triage_over_the_socket_is_acknowledged_and_answered(socket: Socket) -> None:
    name = command(socket, "triage --queue workers")
    answer = answer_to(socket.fake, name)
    assert answer.body["response_type"] == "ephemeral"
    assert "Triage: queue workers (worker_queue)" in texts(answer)


def test_requeue_over_the_socket_approved_once_by_a_second_person(socket: Socket) -> None:
    (failed,) = socket.sql("SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    before = socket.sql("SELECT count(*) FROM qb_change_requests")[0][0]
    name = command(socket, f'requeue {failed} --queue workers --reason "socket test"')
    request = answer_to(socket.fake, name)
    approve = next(b for b in request.body["blocks"] if b["type"] == "actions")["elements"][0]
    assert socket.sql("SELECT count(*) FROM qb_change_requests")[0][0] == before + 1

    click_name = f"sockclick-{time.monotonic_ns()}"
    payload = {
        "type": "block_actions",
        "user": {"id": SLACK_BOB, "username": "bob", "team_id": "T0FAKE"},
        "api_app_id": "A0QUEUEBOT",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "container": {"type": "message", "message_ts": "1764480000.000001"},
        "trigger_id": f"t-{click_name}",
        "channel": {"id": "C0OPS", "name": "ops"},
        "response_url": socket.fake.response_url(click_name),
        "actions": [
            {
                "action_id": approve["action_id"],
                "block_id": "b1",
                "type": "button",
                "value": approve["action_id"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    first = socket.socket.send("interactive", payload)
    socket.socket.wait_ack(first)
    done = answer_to(socket.fake, click_name)
    assert done.body["replace_original"] is True
    assert "approved by bob and executed" in texts(done)
    status = socket.sql(f"SELECT status FROM dev_r_worker_queue WHERE id = {int(failed)}")
    assert status == [("queued",)]

    # Slack redelivers the same click (a new envelope, the same action): acknowledged, and
    # nothing more happens.
    again = socket.socket.send("interactive", payload, retry_attempt=1, retry_reason="timeout")
    socket.socket.wait_ack(again)
    key = f"slack:action:{payload['actions'][0]['action_ts']}:{SLACK_BOB}:{approve['action_id']}"
    socket.served.wait_for_log(f"repeated delivery {key}: acted on or in hand already, ignored")
    assert len(socket.fake.recorded(f"/response/{click_name}")) == 1
    executed = socket.sql(
        "SELECT count(*) FROM qb_audit_events WHERE action = 'change.executed' "
        f"AND subject = 'CR-{approve['action_id'].rsplit(':', 1)[1]}'"
    )
    assert executed[0][0] == 1
