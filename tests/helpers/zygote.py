"""The zygote ``tests/helpers/launch.py`` starts: an interpreter that imports what queuebot's
processes run, then forks one child per request and never runs anything itself.

It takes requests from two places:

- its control socket (the descriptor its one argument names), from the test process: a
  ``queuebot`` command line. The child runs ``bot.cli`` as ``__main__``, as ``python -m
  bot.cli`` does.
- its listening socket, from ``python`` below: a child a forked process *spawns* with
  multiprocessing (serve's worker, multiprocessing's resource tracker). Spawning runs a new
  interpreter with ``-c CODE`` and some descriptors kept open; each child forked here sets
  multiprocessing's interpreter to ``python``, a short script (started with ``-S -E``, 10 ms)
  that hands the zygote its command line, working directory, environment and descriptors,
  forwards the signals it gets, and exits as the child it asked for exits. The zygote
  runs CODE in a fork with those descriptors at the same numbers: multiprocessing's own
  code, from ``spawn_main`` on, unchanged. When ``python`` dies without forwarding (a
  SIGKILL, as to a killed serve's process group), the zygote kills its child.

A request is one SEQPACKET message of JSON and its descriptors: the socket its pid and
wait status are written to (``pid N``, then ``exit STATUS``), stdin, stdout, stderr, and
for a spawn the descriptors to keep. The zygote is single-threaded (a fork copies only the
thread that forks) and ends when the test process closes the control socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import runpy
import secrets
import selectors
import shutil
import socket
import struct
import sys
import tempfile
import threading
import types
from typing import Any

HIGH = 1000  # received descriptors wait here while they are moved to their numbers

PYTHON = """#!{executable} -SE
# multiprocessing's interpreter in processes forked by the test zygote: see
# tests/helpers/zygote.py. Its arguments are those of `python [FLAGS] -c CODE ARGS...`.
import json, os, signal, socket, sys
args = sys.argv[1:]
at = args.index("-c")
keep = []
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    if fd > 2:
        try:
            os.fstat(fd)
        except OSError:
            continue  # the listing's own descriptor, closed by now
        keep.append(fd)
ask = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
ask.connect({address!r})
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
request = {{"kind": "spawn", "code": args[at + 1], "argv": ["-c", *args[at + 2:]],
           "cwd": os.getcwd(), "env": dict(os.environ), "keep": keep}}
socket.send_fds(ask, [json.dumps(request).encode()], [theirs.fileno(), 0, 1, 2, *keep])
theirs.close()
ask.close()
for fd in keep:
    os.close(fd)  # the child holds them now: its end of a pipe closes when it exits
said = ours.recv(64)
if not said.startswith(b"pid "):
    sys.exit(255)
pid = int(said[4:])
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
               signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(signum, forward)
said = ours.recv(64)
status = int(said[5:]) if said.startswith(b"exit ") else 255 << 8
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 255)
"""


class Zygote:
    def __init__(self, control_fd: int) -> None:
        self.control = socket.socket(fileno=control_fd)
        self.folder = tempfile.mkdtemp(prefix="qb-zygote-")
        address = f"\0queuebot-zygote-{os.getpid()}-{secrets.token_hex(6)}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(address)
        self.listener.listen(64)
        self.python = os.path.join(self.folder, "python")
        with open(self.python, "w") as script:
            script.write(PYTHON.format(executable=sys.executable, address=address))
        os.chmod(self.python, 0o755)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.control, selectors.EVENT_READ)
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, reply descriptor)
        self.askers: dict[int, int] = {}  # pidfd of a spawn's `python` -> its child's pid

    def loop(self) -> tuple[dict[str, Any], int, list[int]]:
        """Fork on each request until one returns in a child: the child's request, its
        reply descriptor and its other descriptors."""
        while True:
            for key, _ in self.sel.select():
                if key.fileobj is self.control:
                    try:
                        message, fds, _, _ = socket.recv_fds(self.control, 1 << 20, 4)
                    except ConnectionError:
                        message = b""
                    if not message:
                        raise SystemExit(0)
                    asker = None
                elif key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    with conn:
                        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 256)
                        creds = conn.getsockopt(
                            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
                        )
                    asker = struct.unpack("3i", creds)[0]
                else:
                    self._ended(key.fd)
                    continue
                child = self._fork(json.loads(message), fds, asker)
                if child is not None:
                    return child

    def _fork(
        self, request: dict[str, Any], fds: list[int], asker: int | None
    ) -> tuple[dict[str, Any], int, list[int]] | None:
        reply, *rest = fds
        pid = os.fork()
        if pid == 0:
            return request, reply, rest
        for fd in rest:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, reply)
        self.sel.register(pidfd, selectors.EVENT_READ)
        if asker is not None:
            try:
                watch = os.pidfd_open(asker)
            except ProcessLookupError:
                os.kill(pid, 9)
            else:
                self.askers[watch] = pid
                self.sel.register(watch, selectors.EVENT_READ)
        with contextlib.suppress(OSError):
            os.write(reply, b"pid %d" % pid)
        return None

    def _ended(self, pidfd: int) -> None:
        self.sel.unregister(pidfd)
        if pidfd in self.askers:  # a spawn's `python` died: its child goes with it
            pid = self.askers.pop(pidfd)
            os.close(pidfd)
            if any(p == pid for p, _ in self.children.values()):  # not reaped: still its
                os.kill(pid, 9)
            return
        pid, reply = self.children.pop(pidfd)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            os.write(reply, b"exit %d" % status)
        os.close(reply)
        os.close(pidfd)

    def close_in_child(self, reply: int) -> None:
        """What only the zygote uses, closed in a child."""
        self.sel.close()
        self.control.close()
        self.listener.close()
        for pidfd, (_, other) in self.children.items():
            os.close(pidfd)
            os.close(other)
        for watch in self.askers:
            os.close(watch)
        os.close(reply)


def _descriptors(streams: list[int], keep: list[int], wanted: list[int]) -> None:
    """Streams onto 0, 1 and 2, and each kept descriptor onto the number it is wanted at
    (through HIGH and up, so that no move lands on one not moved yet)."""
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, HIGH) for fd in keep]
    for fd in {*streams, *keep}:
        if fd > 2:
            os.close(fd)
    for fd, target in zip(high, wanted, strict=True):
        os.dup2(fd, target)
        os.close(fd)


def _become(request: dict[str, Any]) -> None:
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])


def main() -> None:
    # What the children run, imported once here.
    import multiprocessing
    import multiprocessing.resource_tracker
    import multiprocessing.spawn

    import discord  # noqa: F401 (serve imports it when Discord is configured)

    import bot.audit_cli
    import bot.cli
    import bot.config_check
    import bot.console_cli
    import bot.db_cli
    import bot.demo_cli
    import bot.estate_cli
    import bot.housekeep_cli
    import bot.runbook_cli
    import bot.serve
    import bot.worker

    assert threading.active_count() == 1, "the zygote must stay single-threaded to fork"
    gc.freeze()  # what the imports made is never collected: no child copies it to look

    zygote = Zygote(int(sys.argv[1]))
    try:
        request, reply, fds = zygote.loop()
    except SystemExit:
        shutil.rmtree(zygote.folder, ignore_errors=True)
        raise
    # A child from here on.
    zygote.close_in_child(reply)
    multiprocessing.set_executable(zygote.python)  # what it spawns is forked here too
    streams, keep = fds[:3], fds[3:]
    if request["kind"] == "cli":
        _descriptors(streams, [], [])
        if request["new_session"]:
            os.setsid()
        _become(request)
        sys.argv = [bot.cli.__file__, *request["args"]]
        sys.path[0] = os.getcwd()  # as -m sets it
        del sys.modules["bot.cli"]  # as -m finds it: not imported yet (runpy warns otherwise)
        runpy.run_module("bot.cli", run_name="__main__", alter_sys=True)
        return
    _descriptors(streams, keep, request["keep"])
    _become(request)
    sys.argv = request["argv"]
    del sys.modules["bot.cli"]  # multiprocessing imports serve's main module afresh
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    exec(compile(request["code"], "<string>", "exec"), main_module.__dict__)
