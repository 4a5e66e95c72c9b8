"""``queuebot demo`` as a process a test types into: each line as a person types it, a wait
until a plan reaches a state (read from the demo's SQLite file), and its output at the end.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.processes import clean_environ, interactive


def plan_state(db: Path, number: int) -> str | None:
    try:
        with sqlite3.connect(db) as conn:
            found = conn.execute("SELECT state FROM qb_plans WHERE id = ?", (number,)).fetchone()
    except sqlite3.OperationalError:  # the demo is still building its estate
        return None
    return str(found[0]) if found else None


class DemoSession:
    def __init__(self, demo: subprocess.Popen[str], db: Path) -> None:
        self.demo = demo
        self.db = db

    def say(self, line: str) -> None:
        assert self.demo.stdin is not None
        self.demo.stdin.write(line + "\n")
        self.demo.stdin.flush()

    def wait_for(self, number: int, state: str, within: float = 90) -> None:
        deadline = time.monotonic() + within
        while plan_state(self.db, number) != state:
            assert self.demo.poll() is None, self.demo.communicate()
            assert time.monotonic() < deadline, f"P-{number} is {plan_state(self.db, number)}"
            time.sleep(0.5)

    def finish(self, timeout: float = 60) -> tuple[str, str]:
        """Standard input closed (the console ends), then what it printed."""
        return self.demo.communicate(timeout=timeout)


@contextmanager
def demo_session(folder: Path, *args: str) -> Iterator[DemoSession]:
    """``queuebot demo ARGS`` in ``folder``, without the caller's queuebot or Slack
    environment; killed if the block ends before it did."""
    env = clean_environ()
    demo = interactive("demo", *args, cwd=folder, env=env)
    try:
        yield DemoSession(demo, folder / "queuebot.db")
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
