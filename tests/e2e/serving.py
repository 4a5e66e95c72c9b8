"""Starting the real ``queuebot serve`` for end-to-end tests: a demo database (SQLite or a
fresh PostgreSQL one), the process itself, and its log checked for tracebacks at the end."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bot.demo import DEMO_CONFIG, record_history
from services.config import default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.ports import free_port
from tests.conftest import postgres_database, templates
from tests.helpers import launch
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.platforms import slack_env
from tests.helpers.processes import clean_environ, stop

# serve does not start without an alert token (or [alerts] allow_unauthenticated = true):
# the tests' serve has this one, and ALERT_AUTH is the header Alertmanager sends with it.
ALERT_TOKEN = "test-alert-token-5f1c0e9a7d3b"
ALERT_AUTH = {"Authorization": f"Bearer {ALERT_TOKEN}"}


@contextlib.contextmanager
def demo_database(kind: str, workdir: Path) -> Iterator[str]:
    """A migrated database holding the demo estate and a quarter hour of queue history
    (so the redrive growth check has a baseline); PostgreSQL ones are dropped after."""
    with contextlib.ExitStack() as stack:
        # Copies of the migrated template; the demo is built here, at the time of the test.
        if kind == "postgres":
            db_url = stack.enter_context(contextlib.contextmanager(postgres_database)("migrated"))
        else:
            db_url = templates().sqlite("migrated", workdir, "queuebot.db")
        _build(db_url)
        yield db_url


def _build(db_url: str) -> None:

    async def build() -> None:
        engine = create_engine(db_url)
        await upgrade(engine)
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=datetime.now(UTC))
        await record_history(
            engine, Estate(engine=engine, queues=default_queues()), ago=timedelta(minutes=15)
        )
        await engine.dispose()

    asyncio.run(build())


@dataclass(frozen=True)
class Served:
    url: str
    log: Path
    pid: int

    def rss_kb(self) -> int:
        """The process's resident memory now (VmRSS in /proc/PID/status), in KB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError(f"no VmRSS for process {self.pid}")

    def wait_for_log(self, text: str, timeout: float = 15.0) -> None:
        """Until serve's log holds ``text``: proof that it got as far as saying so."""
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"serve never logged {text!r}")
            time.sleep(0.02)


def port_taken(log: str) -> bool:
    """Whether serve ended because its --port was bound by another process first (a
    free port is only asked for, not reserved: another test may take it meanwhile)."""
    return "cannot listen on" in log and "in use" in log


def _up(proc: subprocess.Popen[bytes], url: str, log_path: Path) -> bool:
    """Until serve answers /healthz (True) or ends (False); 30 s at most."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if web.get(f"{url}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise RuntimeError(f"serve did not answer /healthz in 30 s:\n{log_path.read_text()}")
        time.sleep(0.1)


@contextlib.contextmanager
def running_serve(
    workdir: Path,
    db_url: str,
    env: dict[str, str],
    *,
    extra: str = "",
    config_text: str = "",
    fresh: bool = False,
) -> Iterator[Served]:
    """`queuebot serve` with the demo config (or ``config_text``, and ``extra`` TOML after
    it), the alert token ALERT_TOKEN and these variables, until it answers /healthz.
    Stopped after; its log must hold no traceback. Forked from the test process's zygote
    (``tests/helpers/launch.py``), or with ``fresh`` a new interpreter."""
    config = workdir / "queuebot.toml"
    config.write_text((config_text or DEMO_CONFIG.format(config=config)) + extra)
    full = clean_environ()
    full.update(
        QUEUEBOT_CONFIG=str(config),
        QUEUEBOT_DATABASE_URL=db_url,
        QUEUEBOT_LOG_LEVEL="INFO",
        QUEUEBOT_ALERT_TOKEN=ALERT_TOKEN,
    )
    full.update(env)
    for name in env:  # NAME_FILE names the file holding NAME: it replaces the one set here
        if name.endswith("_FILE"):
            full.pop(name.removesuffix("_FILE"), None)
    log_path = workdir / "serve.log"
    for attempt in range(1, 4):
        port = free_port()
        with log_path.open("w") as log:
            proc = launch.popen(
                [sys.executable, "-m", "bot.cli", "serve", "--port", str(port)],
                cwd=workdir,
                env=full,
                stdout=log,
                stderr=subprocess.STDOUT,
                fresh=fresh,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            if _up(proc, url, log_path):
                yield Served(url, log_path, proc.pid)
                break
            if attempt < 3 and port_taken(log_path.read_text()):
                continue  # another process bound the port between free_port() and serve
            raise RuntimeError(log_path.read_text())
        finally:
            stop(proc)
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


@contextlib.contextmanager
def serve_posting_to(
    fake: FakeSlack, workdir: Path, kind: str, alert_token: str, *, post_interval: float
) -> Iterator[Served]:
    """serve on a demo database (``kind``: sqlite or postgres), posting to the fake Slack
    one post a channel every ``post_interval`` seconds at most, taking Alertmanager's
    alerts with ``alert_token`` and with no detector of its own: what it posts comes of
    the alerts a test sends."""
    env = slack_env(fake, token="xoxb-fake", secret="e2e-signing-secret")
    env["QUEUEBOT_ALERT_TOKEN"] = alert_token
    extra = f"\n[slack]\npost_interval_seconds = {post_interval}\n" + DETECTORS_OFF
    with (
        demo_database(kind, workdir) as db_url,
        running_serve(workdir, db_url, env, extra=extra) as served,
    ):
        yield served
