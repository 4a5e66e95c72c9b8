"""A plan asked for in `queuebot console` while `queuebot serve` runs on the same PostgreSQL
database: whichever process runs its waves, its news is printed in the console session that
asked. A session that has ended is not stood in for (`/queue plan` says its news was shown
nowhere, and serve never gives those posts up), and a plan asked for in Slack has its news
posted in Slack by serve, even when a console approves it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import wire_services
from bot.demo import DEMO_CONFIG
from services.audit import Actor, AuditTrail
from services.config import ApprovalConfig, RedriveConfig, default_queues
from services.db import create_engine
from services.estate.estate import Estate, utcnow
from services.estate.ops import Selector
from testkit.fake_slack import Call, FakeSlack
from tests.e2e.serving import demo_database, running_serve
from tests.helpers.processes import clean_environ, interactive
from tests.integration.support import simulated_worker
from tests.kinds import ChangeKind

pytestmark = pytest.mark.postgres

REDRIVE = '@alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed"'
APPROVE = "@bob /queue approve CR-1"
# the demo's configuration, its waves looked at five times a second and never held back by
# their pace (the 14 ffmpeg dead letters go in three waves: the sample of 2, then 4 and 8)
CONFIG = (
    DEMO_CONFIG.format(config="queuebot.toml").split("\n[redrive]")[0]
    + "\n[slack]\npost_interval_seconds = 0\n\n[redrive]\npoll_seconds = 0.2\nvelocity = 100000\n"
    # the demo's failed jobs would trip the built-in detector whenever two of serve's counts
    # fall in the test (a minute boundary): an alert post, not the plan's, in another channel
    + "\n[alerts.detectors.failed_actionable]\nenabled = false\n"
)
SLACK = {"SLACK_BOT_TOKEN": "xoxb-fake", "SLACK_SIGNING_SECRET": "beside-serve-secret"}


class ConsoleProcess:
    """`queuebot console` on the database, fed line by line; what it prints is read as it
    comes, so the test can wait for a post."""

    def __init__(self, workdir: Path, db_url: str, name: str) -> None:
        env = clean_environ(discord=True)
        env.update(QUEUEBOT_CONFIG=str(workdir / "queuebot.toml"), QUEUEBOT_DATABASE_URL=db_url)
        self.errors = workdir / f"{name}.err"
        with self.errors.open("w") as err:
            self.proc = interactive("console", cwd=workdir, env=env, stderr=err)
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)

    @property
    def printed(self) -> str:
        return "".join(self._lines)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    async def wait_for(self, text: str, within: float = 20) -> None:
        deadline = time.monotonic() + within
        while text not in self.printed:
            assert self.proc.poll() is None, self.printed + self.errors.read_text()
            if time.monotonic() > deadline:
                raise AssertionError(f"the console never printed {text!r}:\n{self.printed}")
            await asyncio.sleep(0.05)

    def close(self) -> str:
        """Say exit; everything it printed (its error output must hold no traceback)."""
        if self.proc.poll() is None:
            self.say("exit")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        assert "Traceback" not in self.errors.read_text(), self.errors.read_text()
        return self.printed

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    with (
        demo_database("postgres", tmp_path) as db_url,
        running_serve(tmp_path, db_url, {}, config_text=CONFIG),
    ):
        yield db_url


async def plan_waves(engine: AsyncEngine) -> tuple[str, int]:
    async with engine.connect() as conn:
        state, waves = (
            await conn.execute(sa.text("SELECT state, waves FROM qb_plans WHERE id = 1"))
        ).one()
    return str(state), len((waves if isinstance(waves, dict) else {}).get("waves", []))


async def work_until(engine: AsyncEngine, state: str | None, waves: int = 0) -> None:
    """Act as the queue's workers until the plan is in ``state`` (or has ``waves``)."""
    deadline = time.monotonic() + 60
    while True:
        await simulated_worker(engine, now=utcnow())
        now = await plan_waves(engine)
        if now[0] == state or (state is None and now[1] >= waves):
            return
        assert time.monotonic() < deadline, f"P-1 is {now}"
        await asyncio.sleep(0.1)


async def pause_outside_transactions(engine: AsyncEngine, console: ConsoleProcess) -> None:
    """Stop the console (SIGSTOP) where it holds no transaction open: stopped inside one,
    it would hold a lock serve's scheduler or relay waits for."""
    for _ in range(50):
        os.kill(console.proc.pid, signal.SIGSTOP)
        await asyncio.sleep(0.3)
        async with engine.connect() as conn:
            held = (
                await conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                        "current_database() AND state LIKE 'idle in transaction%' "
                        "AND xact_start < now() - interval '250 milliseconds'"
                    )
                )
            ).scalar_one()
        if held == 0:
            return
        os.kill(console.proc.pid, signal.SIGCONT)
        await asyncio.sleep(0.1)
    raise AssertionError("the console was always inside a transaction")


async def outbox_of_the_plan(engine: AsyncEngine) -> list[tuple[bool, str | None, int]]:
    """Each of P-1's posts: (done, last_error, attempts)."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT done_at IS NOT NULL, last_error, attempts FROM qb_outbox "
                    "WHERE kind = 'plan.news' AND subject = '1' ORDER BY id"
                )
            )
        ).all()
    return [(bool(done), error, int(attempts)) for done, error, attempts in rows]


def post_numbered(printed: str, text: str) -> str:
    """The message number of the post printed with ``text`` on the line under its header."""
    found = re.search(
        r"^\[#console thread \S+\] \(message (\S+)\)\n" + re.escape(text), printed, re.M
    )
    assert found, f"no post {text!r} on lines of its own:\n{printed}"
    return found.group(1)


def session_of(number: str) -> str:
    """A console message number is its session's mark, a dash, and a count."""
    return number.rsplit("-", 1)[0]


def test_a_wave_serve_starts_is_printed_in_the_console_that_asked(
    served: str, tmp_path: Path
) -> None:
    console = ConsoleProcess(tmp_path, served, "console")
    engine = create_engine(served)

    async def scenario() -> None:
        console.say(REDRIVE)
        console.say(APPROVE)
        await console.wait_for("P-1 sample started")  # the approval's own post, at once
        # Paused, the console's scheduler cannot run the plan's next tick: the sample's
        # jobs finish only now, and serve's scheduler alone starts wave 1.
        await pause_outside_transactions(engine, console)
        try:
            await work_until(engine, None, waves=2)
        finally:
            os.kill(console.proc.pid, signal.SIGCONT)
        await work_until(engine, "completed")
        await console.wait_for("P-1 wave 1 started")
        await console.wait_for("P-1 wave 2 finished")
        deadline = time.monotonic() + 10
        while not all(done for done, _, _ in await outbox_of_the_plan(engine)):
            assert time.monotonic() < deadline, await outbox_of_the_plan(engine)
            await asyncio.sleep(0.1)
        # each delivered, none given up as "not posted" on the way
        assert all(error is None for _, error, _ in await outbox_of_the_plan(engine))

    try:
        asyncio.run(scenario())
        printed = console.close()
    finally:
        console.kill()
        asyncio.run(engine.dispose())
    sample = post_numbered(printed, "P-1 sample started")
    for wave in ("P-1 sample finished", "P-1 wave 1 started", "P-1 wave 1 finished"):
        # printed by this console, numbered as its session's own posts are
        assert session_of(post_numbered(printed, wave)) == session_of(sample), wave


def test_a_closed_console_session_is_not_stood_in_for_and_the_plan_says_so(
    served: str, tmp_path: Path
) -> None:
    asking = ConsoleProcess(tmp_path, served, "asking")
    engine = create_engine(served)

    async def scenario() -> None:
        asking.say(REDRIVE)
        asking.say(APPROVE)
        await asking.wait_for("P-1 sample started")
        asking.close()  # the session that asked has ended
        await work_until(engine, "completed")  # serve runs every later wave
        await asyncio.sleep(2)  # serve's relay passes over the posts meanwhile

    try:
        asyncio.run(scenario())
        later = ConsoleProcess(tmp_path, served, "later")
        try:
            later.say("/queue plan P-1")
            printed = later.close()
        finally:
            later.kill()
        posts = asyncio.run(outbox_of_the_plan(engine))
    finally:
        asking.kill()
        asyncio.run(engine.dispose())
    # a new session does not take over the posts of the one that ended
    assert "wave 1 started" not in printed
    plan = printed.split("> /queue plan P-1\n", 1)[1]
    assert "P-1: redrive 14 dead letters in clips - completed" in plan
    assert "Not shown anywhere: " in plan, plan
    assert "printed only by the console session that asked for P-1" in plan, plan
    # serve neither delivered them nor gave them up: they wait, never tried, no error kept
    waiting = [p for p in posts if not p[0]]
    assert waiting and all(error is None and attempts == 0 for _, error, attempts in waiting)
    assert f"{len(waiting)} update(s) of P-1's news" in plan, plan


def slack_posts(fake: FakeSlack) -> list[Call]:
    return [c for c in fake.recorded("/api/chat.postMessage") if c.body.get("channel")]


def test_a_plan_asked_for_in_slack_is_posted_in_slack_when_the_console_approves(
    tmp_path: Path,
) -> None:
    with (
        FakeSlack().start() as fake,
        demo_database("postgres", tmp_path) as db_url,
        running_serve(
            tmp_path, db_url, SLACK | {"SLACK_API_BASE_URL": fake.api_url}, config_text=CONFIG
        ),
    ):
        engine = create_engine(db_url)
        console = ConsoleProcess(tmp_path, db_url, "console")

        async def scenario() -> None:
            changes = wire_services(
                state_engine=engine,
                estate=Estate(engine=engine, queues=default_queues()),
                clock=utcnow,
                approval=ApprovalConfig(),
                redrive=RedriveConfig(poll_seconds=0.2, velocity=100_000),
                notifier=None,
                audit=AuditTrail(),
            ).changes
            await changes.request(
                kind=ChangeKind.PLAN,
                queue="clips",
                selector=Selector(error_like="ffmpeg", sample=2),
                reason="OOM fix deployed",
                actor=Actor("alice", "slack", "U0ALICE"),
                origin={"platform": "slack", "channel": "C0OPS", "thread": None},
            )
            console.say(APPROVE)
            await console.wait_for("approved")
            await work_until(engine, "completed")
            deadline = time.monotonic() + 20
            while not any("wave 2 finished" in str(c.body) for c in slack_posts(fake)):
                assert time.monotonic() < deadline, [c.body.get("text") for c in slack_posts(fake)]
                await asyncio.sleep(0.1)

        try:
            asyncio.run(scenario())
            printed = console.close()
        finally:
            console.kill()
            asyncio.run(engine.dispose())
    posts = slack_posts(fake)
    assert {c.body["channel"] for c in posts} == {"C0OPS"}
    (root,) = [c for c in posts if not c.body.get("thread_ts")]
    assert "P-1" in str(root.body)
    thread = " ".join(str(c.body) for c in posts if c.body.get("thread_ts") == root.ts)
    for news in ("P-1 sample started", "P-1 wave 1 started", "P-1 wave 2 finished"):
        assert news in thread, news
    # the console that approved printed its reply, and none of the plan's posts
    for post in ("== P-1: redrive", "P-1 sample started", "P-1 wave 1 started"):
        assert post not in printed, printed
