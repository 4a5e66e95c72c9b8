"""The test zygote (tests/helpers/launch.py) gives what a new interpreter gives: the same
output, exit code, working directory and environment, and a signal's death. (What a
forked serve spawns, its worker, is run by every end-to-end test of serve on PostgreSQL,
and killed with serve's process group by the reliability suite's SIGKILLs.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import launch
from tests.helpers.processes import clean_environ

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux's pidfd_open")


def both(*args: str, cwd: Path, env: dict[str, str], stdin: str = "") -> list[tuple[int, str, str]]:
    """``queuebot ARGS`` forked and in a new interpreter: exit code, stdout, stderr."""
    argv = launch.queuebot_argv(*args)
    runs = [
        launch.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd, env=env, fresh=fresh)
        for fresh in (False, True)
    ]
    return [(r.returncode, r.stdout, r.stderr) for r in runs]


def console(cwd: Path) -> subprocess.Popen[bytes]:
    """A forked ``queuebot console``, waiting on its stdin."""
    return launch.popen(
        launch.queuebot_argv("console"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=clean_environ(discord=True),
    )


def test_a_forked_command_answers_as_a_new_interpreter_does(tmp_path: Path) -> None:
    env = clean_environ(discord=True)
    forked, fresh = both("--help", cwd=tmp_path, env=env)
    assert forked == fresh
    assert forked[0] == 0 and "usage: queuebot" in forked[1]
    # a usage error: its exit code and its one line on stderr
    forked, fresh = both("no-such-command", cwd=tmp_path, env=env)
    assert forked == fresh
    assert forked[0] == 2


def test_a_forked_command_takes_the_tests_directory_and_environment(tmp_path: Path) -> None:
    (tmp_path / "queuebot.toml").write_text("this is [not toml\n")
    env = {**clean_environ(discord=True), "QUEUEBOT_CONFIG": str(tmp_path / "queuebot.toml")}
    forked, fresh = both("config", "check", cwd=tmp_path, env=env)
    assert forked == fresh
    assert "queuebot.toml" in forked[1] + forked[2]
    assert forked[0] != 0


def test_a_forked_process_dies_of_a_signal_as_its_returncode_says(tmp_path: Path) -> None:
    proc = console(tmp_path)
    assert isinstance(proc, launch._Forked)
    time.sleep(0.3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL


def test_a_forked_process_can_be_waited_for_with_a_timeout(tmp_path: Path) -> None:
    proc = console(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.terminate()
    proc.communicate(timeout=10)
    assert proc.returncode is not None


def test_what_a_fork_cannot_be_starts_a_new_interpreter() -> None:
    argv = launch.queuebot_argv("--help")
    assert not isinstance(launch.popen(["true"]), launch._Forked)
    python = {**os.environ, "PYTHONHASHSEED": "123"}  # read by an interpreter as it starts
    proc = launch.popen(argv, env=python, stdout=subprocess.DEVNULL)
    assert not isinstance(proc, launch._Forked)
    proc.wait(timeout=30)
    proc = launch.popen(argv, stdout=subprocess.DEVNULL, fresh=True)
    assert not isinstance(proc, launch._Forked)
    proc.wait(timeout=30)


def test_a_directory_that_is_not_there_is_an_error_in_the_test_as_subprocess_gives(
    tmp_path: Path,
) -> None:
    for fresh in (False, True):
        with pytest.raises(OSError):
            launch.popen(launch.queuebot_argv("--help"), cwd=tmp_path / "gone", fresh=fresh)
