"""Ending the processes a test started: asked to stop, then killed if they do not in time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from tests.helpers import launch


def stop(*procs: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM to each still running, and SIGKILL where it has not ended within
    ``timeout`` seconds."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def clean_environ(*, discord: bool = False) -> dict[str, str]:
    """This process's environment without queuebot's and Slack's variables (and Discord's
    where asked): a queuebot the test starts reads only the configuration it is given."""
    own = ("QUEUEBOT_", "SLACK_", "DISCORD_") if discord else ("QUEUEBOT_", "SLACK_")
    return {k: v for k, v in os.environ.items() if not k.startswith(own)}


def interactive(
    *args: str,
    cwd: Path,
    env: dict[str, str],
    stdout: int | IO[Any] = subprocess.PIPE,
    stderr: int | IO[Any] = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """``queuebot ARGS`` (``python -m bot.cli``) as a person at a terminal talks to it:
    lines written to its stdin, its output read as text."""
    return launch.popen(
        [sys.executable, "-m", "bot.cli", *args],
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
        text=True,
        cwd=cwd,
        env=env,
    )
