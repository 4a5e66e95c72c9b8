"""A database that stops answering while `queuebot serve` runs: a network partition that
drops packets, not one that refuses them. Connections stay open and nothing comes back,
so nothing fails by itself; only queuebot's own timeouts can say the database is away.

PostgreSQL is reached through a loopback TCP proxy (testkit/tcp_proxy.py) that goes
silent: it holds every byte either side sends and delivers them when it forwards again,
as TCP does once a path is back. A write that queuebot gave up on may therefore still
reach the database after the silence; queuebot must not act on it then.

What a person notices is asserted: a command sent during the silence is acknowledged
within Slack's 3 s and answered within 15 s, saying the database is unavailable and the
command was not recorded; /readyz says 503 within 15 s while /healthz stays 200 (the
process is alive: a restart would not bring the database back); when the database
answers again, commands work, and nothing acknowledged was lost or done behind the
person's back: one answer per command, no request made by a command answered "not
recorded", no delivery left unanswered."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from testkit import web
from testkit.tcp_proxy import TcpProxy
from tests.e2e.serving import demo_database
from tests.helpers.people import SLACK_ALICE
from tests.reliability.harness import (
    STALE_SECONDS,
    Cluster,
    Delivery,
    Figures,
    Serve,
    answers,
    cluster,
    new_tag,
    send,
    slash,
    text_of,
    wait_answer,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ACK_WITHIN = 3.0  # Slack shows the person an error after this
ANSWER_WITHIN = 15.0  # the answer to a command sent while the database is silent
NOT_READY_WITHIN = 15.0  # /readyz after the database goes silent
SILENCE = 25.0  # seconds of silence: a claim written before it would go stale meanwhile


@pytest.fixture
def silent_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, TcpProxy]]:
    """A cluster whose serves reach PostgreSQL through the proxy, while the test reads
    the database directly (its reads must not wait out the silence)."""
    with demo_database("postgres", tmp_path) as direct:
        url = make_url(direct)
        with TcpProxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
            through = url.set(port=proxy.port).render_as_string(hide_password=False)
            env = {"QUEUEBOT_DATABASE_URL": through}
            with cluster(tmp_path, db_url=direct, env=env) as c:
                yield c, proxy


def status(served: Serve, path: str) -> int:
    return web.get(f"{served.url}{path}", timeout=10).status_code


def wait_status(served: Serve, path: str, want: int, *, within: float) -> float:
    """Seconds until ``path`` answers ``want``; fails after ``within``."""
    started = time.monotonic()
    while status(served, path) != want:
        assert time.monotonic() - started < within, f"{path} never answered {want}"
        time.sleep(0.2)
    return time.monotonic() - started


class Probes:
    """/readyz and /healthz asked every quarter second from the start of the silence, as
    an orchestrator would: when /readyz first said 503, and every /healthz answer."""

    def __init__(self, served: Serve) -> None:
        self.served = served
        self.started = time.monotonic()
        self.not_ready_after: float | None = None
        self.health: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            with contextlib.suppress(httpx.TransportError):
                self.health.add(status(self.served, "/healthz"))
            if self.not_ready_after is None:
                with contextlib.suppress(httpx.TransportError):
                    if status(self.served, "/readyz") == 503:
                        self.not_ready_after = time.monotonic() - self.started

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def requests_made(c: Cluster) -> int:
    return int(c.scalar("SELECT count(*) FROM qb_change_requests"))


def command(c: Cluster, served: Serve, text: str, tag: str) -> tuple[Delivery, float, float]:
    """Send ``/queue text``; the delivery, the seconds to the ack and to the answer."""
    d = slash(c.fake, text, user=SLACK_ALICE, tag=new_tag(tag))
    sent = time.monotonic()
    response = send(served.url, d)
    acked = time.monotonic() - sent
    assert response.status_code == 200, response.text
    answer = wait_answer(c.fake, d, timeout=ANSWER_WITHIN + 30)
    return d, acked, answer.at - sent


def test_a_silent_database_is_answered_and_nothing_acknowledged_is_lost(
    silent_cluster: tuple[Cluster, TcpProxy], figures: Figures
) -> None:
    c, proxy = silent_cluster
    served = c.start()
    wait_status(served, "/readyz", 200, within=30)
    (failed,) = c.sql("SELECT min(id) FROM dev_r_worker_queue WHERE status = 'failed'")[0]
    before = requests_made(c)
    sent: list[Delivery] = []
    d, _, _ = command(c, served, "pending", "warm")  # connections open and pooled
    sent.append(d)

    proxy.silence()
    silent_at = time.monotonic()
    probes = Probes(served)
    asked = [
        f'requeue {failed} --queue workers --reason "during the silence"',
        "triage --queue workers",
    ]
    acks, waits = [], []
    for n, text in enumerate(asked):
        d, acked, waited = command(c, served, text, f"silent{n}")
        sent.append(d)
        acks.append(round(acked, 2))
        waits.append(round(waited, 2))
        reply = text_of(answers(c.fake, d)[0])
        assert acked < ACK_WITHIN, (text, acked)
        assert waited < ANSWER_WITHIN, (text, waited, reply)
        assert "Database unavailable" in reply, reply
        assert "not recorded" in reply, reply
        assert "try again" in reply.lower(), reply
        assert "unexpected error" not in reply.lower(), reply
    wait_status(served, "/readyz", 503, within=NOT_READY_WITHIN)
    body = web.get(f"{served.url}/readyz", timeout=10).json()
    assert body["databases"]["state"] == "unreachable", body

    time.sleep(max(0.0, SILENCE - (time.monotonic() - silent_at)))
    probes.stop()
    not_ready_after = probes.not_ready_after
    assert not_ready_after is not None and not_ready_after < NOT_READY_WITHIN, not_ready_after
    assert probes.health == {200}  # alive throughout: a restart would not help
    proxy.forward()  # what was held reaches the database now
    forwarded_at = time.monotonic()
    ready_again = wait_status(served, "/readyz", 200, within=30)

    d, _, _ = command(c, served, f'requeue {failed} --queue workers --reason "after"', "after")
    sent.append(d)
    assert "waiting for approval" in text_of(answers(c.fake, d)[0])

    # Long enough for any claim written during the silence to go stale and be adopted
    # by the orphan sweep (every 2 s): it must not be, nor answered a second time.
    time.sleep(STALE_SECONDS + 5)
    assert [len(answers(c.fake, d)) for d in sent] == [1] * len(sent)
    assert requests_made(c) == before + 1  # the silent requeue was never made
    unanswered = c.scalar(
        "SELECT count(*) FROM qb_deliveries WHERE request IS NOT NULL AND answered_at IS NULL"
    )
    assert unanswered == 0
    log = served.log.read_text(errors="replace")
    assert "Traceback" not in log

    stored = figures.record(
        "silent database",
        {
            "ack during the silence (s)": acks,
            "answer during the silence (s)": waits,
            "database silent to the first /readyz 503 (s)": round(not_ready_after, 2),
            "forwarding again to /readyz 200 (s)": round(ready_again, 2),
            "silence (s)": round(forwarded_at - silent_at, 1),
        },
    )
    assert max(stored["answer during the silence (s)"]) < ANSWER_WITHIN
