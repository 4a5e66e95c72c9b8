"""The real Alertmanager 0.25 posting to the real `queuebot serve`, which posts to the
local fake Slack: two groups give one root each, an alert added to a group lands in its
thread, repeat intervals post nothing new, the resolution lands in the thread and on the
root, and an Alertmanager with a wrong or no token is refused (401) and posts nothing."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fake_slack import Call, FakeSlack
from tests.e2e.alerting_stack import Alertmanager
from tests.e2e.serving import Served, serve_posting_to

pytestmark = pytest.mark.alerting

TOKEN = "qb-alert-token-for-the-e2e-tests"
STUCK = {"alertname": "QueueStuck", "queue": "clips"}
DISK = {"alertname": "DiskFilling", "queue": "workers"}


@pytest.fixture
def served(fake: FakeSlack, tmp_path: Path) -> Iterator[Served]:
    # only Alertmanager's alerts here: the demo's failed jobs would fire a detector
    with serve_posting_to(fake, tmp_path, "sqlite", TOKEN, post_interval=0.2) as serve:
        yield serve


def posts(fake: FakeSlack) -> list[Call]:
    return [c for c in fake.recorded() if c.path == "/api/chat.postMessage"]


def roots(fake: FakeSlack) -> list[Call]:
    return [c for c in posts(fake) if not c.body.get("thread_ts")]


def thread(fake: FakeSlack, root: Call) -> list[Call]:
    return [c for c in posts(fake) if c.body.get("thread_ts") == root.ts]


def root_of(fake: FakeSlack, name: str) -> Call:
    (found,) = [c for c in roots(fake) if name in str(c.body["blocks"])]
    return found


def eventually(check: object, timeout: float = 20.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_threads_from_the_real_alertmanager(
    fake: FakeSlack, served: Served, tmp_path: Path
) -> None:
    # Flushed and repeated every second, so the repeats below come quickly.
    with Alertmanager(
        f"{served.url}/alerts/alertmanager",
        token=TOKEN,
        group_interval="1s",
        repeat_interval="1s",
    ) as am:
        am.post_alerts(
            [
                {"labels": {**STUCK, "instance": "a"}, "annotations": {"summary": "clips stuck"}},
                {"labels": DISK, "annotations": {"summary": "disk 91%"}},
            ]
        )
        eventually(lambda: _count(roots(fake), 2))
        stuck = root_of(fake, "QueueStuck")
        assert "FIRING: QueueStuck · queue clips" in str(stuck.body["blocks"])

        am.post_alerts([{"labels": {**STUCK, "instance": "b"}, "annotations": {"summary": "b"}}])
        eventually(lambda: _count(thread(fake, stuck), 1))
        assert "instance=b" in str(thread(fake, stuck)[0].body["blocks"])
        # the root is brought up to date right after the reply: both, before the repeats
        eventually(lambda: _count(updates_of(fake, stuck), 1))

        seen = len(fake.recorded())
        # At least two repeats of the group reach queuebot and are processed, and every
        # post they might have made is out of the outbox: proof that the repeats happened
        # and were acted on, without a fixed sleep.
        state = tmp_path / "queuebot.db"
        before = _processed(state, "QueueStuck")
        eventually(lambda: _at_least(_processed(state, "QueueStuck"), before + 2))
        eventually(lambda: _at_least(0, _outbox_pending(state)))
        assert len(fake.recorded()) == seen, [c.path for c in fake.recorded()[seen:]]

        am.resolve({**STUCK, "instance": "a"})
        am.resolve({**STUCK, "instance": "b"})
        eventually(lambda: _has(thread(fake, stuck), "All alerts of this group are resolved"), 30)
        eventually(lambda: _has(updates_of(fake, stuck), "RESOLVED: QueueStuck"))
        assert len(roots(fake)) == 2


def updates_of(fake: FakeSlack, root: Call) -> list[Call]:
    return [c for c in fake.recorded("/api/chat.update") if c.body.get("ts") == root.ts]


@pytest.mark.parametrize("token", ["the-wrong-token", None])
def test_an_alertmanager_without_the_token_is_refused(
    fake: FakeSlack, served: Served, token: str | None
) -> None:
    with Alertmanager(f"{served.url}/alerts/alertmanager", token=token) as am:
        am.post_alerts([{"labels": STUCK}])
        eventually(lambda: _logged(am.log(), "401"), 20)
    assert roots(fake) == []


def _processed(db: Path, alertname: str) -> int:
    """How many of Alertmanager's notifications for this alert's group queuebot stored
    and processed."""
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM qb_alert_inbox WHERE source = 'alertmanager' "
            "AND processed_at IS NOT NULL AND group_key LIKE ?",
            (f"%{alertname}%",),
        ).fetchone()
    return int(n)


def _outbox_pending(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        (n,) = conn.execute("SELECT count(*) FROM qb_outbox WHERE done_at IS NULL").fetchone()
    return int(n)


def _at_least(n: int, wanted: int) -> None:
    assert n >= wanted, (n, wanted)


def _count(calls: list[Call], n: int) -> None:
    assert len(calls) == n, [str(c.body.get("text")) for c in calls]


def _has(calls: list[Call], text: str) -> None:
    assert any(text in str(c.body.get("blocks")) for c in calls), [c.body for c in calls]


def _logged(log: str, text: str) -> None:
    assert text in log, log[-2000:]
