"""Answer worker processes never outlive the serving process, even a SIGKILLed one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bot.demo import DEMO_CONFIG
from tests.e2e.test_console import queuebot
from tests.e2e.test_slack import free_port


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_stop_when_the_server_is_killed(tmp_path: Path) -> None:
    queuebot("demo", cwd=tmp_path)  # the demo estate in tmp_path/queuebot.db
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config) + "\n[slack]\nanswer_workers = 1\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUEBOT_", "SLACK_"))}
    env.update(
        QUEUEBOT_CONFIG=str(config),
        SLACK_BOT_TOKEN="xoxb-x",
        SLACK_SIGNING_SECRET="s",
        SLACK_API_BASE_URL="http://127.0.0.1:9/api/",
        QUEUEBOT_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/queuebot.db",
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        workers = []
        while time.monotonic() < deadline and not workers:
            workers = [
                p
                for p in children_of(server.pid)
                if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
            ]
            time.sleep(0.1)
        assert workers, "serve started no answer worker"
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        gone_by = time.monotonic() + 10
        while time.monotonic() < gone_by and any(alive(p) for p in workers):
            time.sleep(0.2)
        assert not any(alive(p) for p in workers), "an answer worker outlived the server"
    finally:
        if server.poll() is None:
            server.kill()
