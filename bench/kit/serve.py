"""The real ``queuebot serve`` as a subprocess, for the benches that measure it from
outside: its demo database, its config (the demo's and the bench's own after it), its
environment, a free port, the wait until it answers, and its log read at the end. The
same runner starts a bare app (the harness floor: what the client and the HTTP stack
cost by themselves).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.demo import DEMO_CONFIG, record_history
from services.config import default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from testkit.fake_slack import FakeSlack
from testkit.ports import free_port
from testkit.slack_requests import SECRET

# serve starts only with an alert token (or [alerts] allow_unauthenticated = true)
ALERT_TOKEN = "bench-alert-token-0123456789"
# the built-in detectors off: every alert post a bench counts is one of its own groups
DETECTORS_OFF = """
[alerts.detectors.queue_loss]
enabled = false
[alerts.detectors.dead_letter_growth]
enabled = false
[alerts.detectors.failed_actionable]
enabled = false
"""


def slack_env(fake: FakeSlack) -> dict[str, str]:
    """serve's Slack variables, pointing at the local fake Slack and signing as it does."""
    return {
        "SLACK_BOT_TOKEN": "xoxb-fake-token",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_BASE_URL": fake.api_url,
    }


def build_demo(db_url: str) -> None:
    """Migrated, with the demo estate and a quarter hour of its queue history."""

    async def run() -> None:
        engine = create_engine(db_url)
        try:
            await upgrade(engine)
            async with engine.begin() as conn:
                await build_demo_estate(conn, now=datetime.now(UTC))
            await record_history(
                engine, Estate(engine=engine, queues=default_queues()), ago=timedelta(minutes=15)
            )
        finally:
            await engine.dispose()

    asyncio.run(run())


def die_with_parent() -> None:
    """In the child: get SIGTERM when the bench process dies, even by SIGKILL (Linux)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Serve:
    """A process answering HTTP at ``url``, its output in ``log``."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    stop_within: float = 15.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_within)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def close(self) -> bool:
        """Stop it and print what its log holds: whether that is a traceback or an error."""
        self.stop()
        said, troubled = self.log_said()
        print(said)
        return troubled

    def log_said(self) -> tuple[str, bool]:
        """A line of what the log holds (tracebacks, ERROR and WARNING lines), and whether
        it holds a traceback or an error."""
        log = self.log.read_text(errors="replace")
        tracebacks = log.count("Traceback")
        lines = log.splitlines()
        errors = sum(1 for line in lines if " ERROR " in line)
        warnings = sum(1 for line in lines if " WARNING " in line)
        said = (
            f"serve log: {tracebacks} traceback(s), {errors} ERROR line(s), "
            f"{warnings} WARNING line(s)"
        )
        return said, bool(tracebacks or errors)


def launch(
    command: Sequence[str],
    workdir: Path,
    *,
    env: Mapping[str, str] | None = None,
    log_name: str = "serve.log",
    guard: bool = False,
    stop_within: float = 15.0,
) -> Serve:
    """``command`` with its port (a free one) last, its output in ``workdir/log_name``, in a
    session of its own (Ctrl-C reaches the bench, which stops it). ``guard``: it gets
    SIGTERM when the bench dies, even by SIGKILL; only while no thread runs in the bench
    (the child runs the guard between fork and exec)."""
    port = free_port()
    log_path = workdir / log_name
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*command, str(port)],
            cwd=workdir,
            env=None if env is None else dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent if guard else None,  # noqa: PLW1509
        )
    return Serve(proc, f"http://127.0.0.1:{port}", log_path, stop_within)


def serve_env(
    config: Path, db_url: str, log_level: str, extra: Mapping[str, str]
) -> dict[str, str]:
    """This process's environment without queuebot's and Slack's variables, then serve's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUEBOT_", "SLACK_"))}
    env.update(
        QUEUEBOT_CONFIG=str(config),
        QUEUEBOT_DATABASE_URL=db_url,
        QUEUEBOT_LOG_LEVEL=log_level,
        QUEUEBOT_ALERT_TOKEN=ALERT_TOKEN,
    )
    env.update(extra)
    return env


def start_serve(
    workdir: Path,
    db_url: str,
    *,
    env: Mapping[str, str],
    config: str = "",
    log_level: str = "INFO",
    python: Sequence[str] = ("-m", "bot.cli"),
    guard: bool = False,
    stop_within: float = 15.0,
) -> Serve:
    """``queuebot serve`` on ``db_url`` with the demo config and ``config`` after it, and
    ``env`` (the platform's variables) beside serve's own. ``python``: what the
    interpreter runs instead of ``-m bot.cli`` (a profiler around it)."""
    path = workdir / "queuebot.toml"
    path.write_text(DEMO_CONFIG.format(config=path) + config, encoding="utf-8")
    return launch(
        [sys.executable, *python, "serve", "--port"],
        workdir,
        env=serve_env(path, db_url, log_level, env),
        guard=guard,
        stop_within=stop_within,
    )


def start_app(workdir: Path, source: str, *, guard: bool = False) -> Serve:
    """A bare app (``source``, Python taking its port as its only argument): the floor."""
    return launch([sys.executable, "-c", source], workdir, log_name="floor.log", guard=guard)


def wait_until(serve: Serve, ready: Callable[[], bool], within: float = 60.0) -> None:
    """Until ``ready()``; an error with the process's log when it ends first or
    ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while not ready():
        if serve.proc.poll() is not None or time.monotonic() > deadline:
            log = serve.log.read_text(errors="replace")
            raise RuntimeError(f"the process at {serve.url} did not come up:\n{log}")
        time.sleep(0.1)


def wait_healthy(serve: Serve, within: float = 60.0) -> None:
    """Until ``GET /healthz`` answers 200."""

    def healthy() -> bool:
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(f"{serve.url}/healthz", timeout=1) as answer,
        ):
            return bool(answer.status == 200)
        return False

    wait_until(serve, healthy, within)
