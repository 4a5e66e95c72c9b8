"""``queuebot`` processes for tests, forked from an interpreter that has imported queuebot.

A test that runs ``python -m bot.cli ARGS`` (a command, the console, ``serve``) pays for a
new interpreter importing queuebot each time: 0.6 s of CPU for a command and 1.5 s for
serve, which spawned its worker as another, on the same two cores the other tests need;
a run starts about 470 of them. So
each test process keeps one *zygote*: an interpreter started once, with a clean
environment, that imports what those processes import and then only forks. Each process
a test asks for is a fork of it that takes the test's working directory, environment and
standard streams, and runs ``bot.cli`` as ``__main__``, as ``-m`` does; it exits as
``python -m bot.cli`` would (its exit code, tracebacks, at-exit handlers, a signal's
death). Its parent is the zygote, which tells the test its pid and then its wait status.
What it spawns with multiprocessing is forked by the zygote too (``zygote.py`` says how).

``popen`` and ``run`` take what ``subprocess.Popen`` and ``subprocess.run`` take and give
what they give (a ``Popen`` whose poll, wait, communicate, terminate and kill work as
usual). They start a real new interpreter instead where a fork would not be the same:
arguments that are not ``[sys.executable, "-m", "bot.cli", ...]``, a ``preexec_fn`` or
``pass_fds``, an environment whose ``PYTHON*`` variables (read by an interpreter as it
starts) differ from the zygote's, ``fresh=True`` (a test that reads what only an exec
sets: ``/proc/PID/environ``, the command line), or ``QUEUEBOT_TEST_FORK=0`` in the
environment of the run (every process a fresh interpreter, as before).

Linux only (``pidfd_open``), as the suite is.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CLI = (sys.executable, "-m", "bot.cli")
_ENABLED = os.environ.get("QUEUEBOT_TEST_FORK", "1") != "0"

ROOT = str(Path(__file__).resolve().parents[2])
# The zygote's program (tests/helpers/zygote.py): the repository's root first on its path,
# where -c would put the working directory.
ZYGOTE = f"import sys; sys.path[0] = {ROOT!r}; from tests.helpers.zygote import main; main()"


class _Zygote:
    """This test process's zygote, started on first use."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(_OWN)}
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (what the zygote says, kept open)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=environ,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.control = ours
        self.python_env = _python_env(environ)
        self._lock = threading.Lock()

    def said(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        """Its control socket closed, the zygote ends (the processes it forked go on)."""
        self.control.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def fork(
        self, args: Sequence[str], cwd: str, env: Mapping[str, str], fds: list[int], new: bool
    ) -> tuple[int, socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {
            "kind": "cli",
            "args": list(args),
            "cwd": cwd,
            "env": dict(env),
            "new_session": new,
        }
        try:
            with self._lock:
                socket.send_fds(
                    self.control, [json.dumps(request).encode()], [theirs.fileno(), *fds]
                )
            ours.settimeout(60)
            first = ours.recv(4096)
            ours.settimeout(None)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if first.startswith(b"error "):  # it could not set up (a directory that is not)
            ours.close()
            raise OSError(first[6:].decode(errors="replace"))
        if not first.startswith(b"pid "):
            ours.close()
            raise OSError(f"the zygote's child did not start; the zygote said:\n{self.said()}")
        return int(first[4:]), ours


_OWN = ("QUEUEBOT_", "SLACK_", "DISCORD_")
_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _python_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _get_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            if _zygote is None:
                atexit.register(_stop_zygote)
            _zygote = _Zygote()
        return _zygote


def _stop_zygote() -> None:
    if _zygote is not None:
        _zygote.stop()


class _Forked(subprocess.Popen):  # type: ignore[type-arg]
    """A Popen whose child is forked by the zygote: its pid and wait status come over a
    socket from the zygote (its parent) instead of from waitpid."""

    _status: socket.socket

    def _execute_child(  # type: ignore[override]
        self,
        args: Sequence[str],
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Any,
        cwd: Any,
        env: Mapping[str, str] | None,
        startupinfo: Any,
        creationflags: Any,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        start_new_session = rest[-2]
        fds = [
            p2cread if p2cread != -1 else 0,
            c2pwrite if c2pwrite != -1 else 1,
            errwrite if errwrite != -1 else 2,
        ]
        try:
            self.pid, self._status = _get_zygote().fork(
                list(args)[3:],
                os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd()),
                env if env is not None else os.environ,
                fds,
                bool(start_new_session),
            )
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _status_now(self, block: bool) -> tuple[int, int]:
        self._status.setblocking(block)
        try:
            message = self._status.recv(64)
        except BlockingIOError:
            return 0, 0
        self._status.close()
        if not message.startswith(b"exit "):  # the zygote went away: the status is lost
            return self.pid, 255 << 8
        return self.pid, int(message[5:])

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        return self._status_now(block=not wait_flags & os.WNOHANG)

    def _internal_poll(self, _deadstate: int | None = None, *_: Any, **__: Any) -> int | None:
        if self.returncode is None and self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
            try:
                if self.returncode is None:
                    pid, status = self._status_now(block=False)
                    if pid == self.pid:
                        self._handle_exitstatus(status)  # type: ignore[attr-defined]
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode


def _forkable(args: Sequence[Any], kwargs: Mapping[str, Any], fresh: bool) -> bool:
    if fresh or not _ENABLED or not hasattr(os, "pidfd_open"):
        return False
    if tuple(str(a) for a in args[:3]) != CLI or any(not isinstance(a, str) for a in args):
        return False
    if kwargs.get("preexec_fn") or kwargs.get("pass_fds") or kwargs.get("shell"):
        return False
    if kwargs.get("executable") or kwargs.get("user") or kwargs.get("group"):
        return False
    if kwargs.get("process_group") is not None or kwargs.get("umask", -1) != -1:
        return False
    env = kwargs.get("env")
    wanted = _python_env(env if env is not None else os.environ)
    return wanted == _get_zygote().python_env


def popen(args: Sequence[Any], *, fresh: bool = False, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)``, forked from the zygote where it can be."""
    if _forkable(args, kwargs, fresh):
        return _Forked(list(args), **kwargs)
    return subprocess.Popen(args, **kwargs)


def run(
    args: Sequence[Any],
    *,
    input: str | bytes | None = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    fresh: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run``, forked from the zygote where it can be."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with popen(args, fresh=fresh, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            exc.stdout, exc.stderr = proc.communicate()
            raise
        except BaseException:
            proc.kill()
            raise
        code = proc.poll()
        assert code is not None
    if check and code:
        raise subprocess.CalledProcessError(code, proc.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(proc.args, code, stdout, stderr)


def queuebot_argv(*args: str | Path) -> list[str]:
    """``python -m bot.cli ARGS``: the command line ``popen`` and ``run`` fork."""
    return [*CLI, *(str(a) for a in args)]
