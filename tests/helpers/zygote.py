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
  code, from ``spawn_main`` on, unchanged, with its parent's open-files limit. The child
  is the zygote's, not in its parent's process group: when ``python`` dies without
  forwarding (a SIGKILL, as to a killed serve's process group), the zygote SIGKILLs the
  child as soon as it sees that (within milliseconds, not at once as a group kill would).
  The listening socket is in a folder only this user can enter, and the zygote checks
  that each peer is this user: what it runs comes from this user's processes alone.

A request is one SEQPACKET message of JSON and its descriptors: the socket its pid and
wait status are written to, stdin, stdout, stderr, and for a spawn the descriptors to
keep. The child writes ``pid N`` there once it is set up (its session, directory and
environment taken, so a signal sent to it from then on finds it as asked); the zygote
writes ``exit STATUS`` once it has reaped it. A request that cannot be read is dropped.
The zygote is single-threaded (a fork copies only the thread that forks) and ends when
the test process closes the control socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import resource
import runpy
import selectors
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import types
from typing import Any

HIGH = 1000  # received descriptors wait here (or higher) while they are moved

PYTHON = """#!{executable} -SE
# multiprocessing's interpreter in processes forked by the test zygote: see
# tests/helpers/zygote.py. Its arguments are those of `python [FLAGS] -c CODE ARGS...`.
import json, os, resource, signal, socket, sys
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)
signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # held until the child can have them
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
           "cwd": os.getcwd(), "env": dict(os.environ), "keep": keep,
           "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}}
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
for signum in FORWARDED:
    signal.signal(signum, forward)
signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
said = ours.recv(64)
status = int(said[5:]) if said.startswith(b"exit ") else 255 << 8
if os.WIFSIGNALED(status):  # die of the child's signal, as its parent would see it
    signum = os.WTERMSIG(status)
    if signum not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 255)
"""


class Zygote:
    def __init__(self, control_fd: int) -> None:
        self.control = socket.socket(fileno=control_fd)
        self.folder = tempfile.mkdtemp(prefix="qb-zygote-")  # 0700: only this user connects
        address = os.path.join(self.folder, "socket")
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
        self.watches: dict[int, int] = {}  # a spawned child's pid -> its `python`'s pidfd

    def loop(self) -> tuple[dict[str, Any], int, list[int]]:
        """Fork on each request until one returns in a child: the child's request, its
        reply descriptor and its other descriptors. A request that cannot be read (its
        sender died sending it) is dropped, its descriptors closed."""
        while True:
            for key, _ in self.sel.select():
                if key.fileobj not in (self.control, self.listener):
                    self._ended(key.fd)
                    continue
                fds: list[int] = []
                try:
                    request, fds, asker = self._read(key.fileobj)
                    child = self._fork(request, fds, asker)
                except (OSError, ValueError, KeyError, TypeError):
                    for fd in fds:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                    continue
                if child is not None:
                    return child

    def _read(self, source: Any) -> tuple[dict[str, Any], list[int], int | None]:
        if source is self.control:
            try:
                message, fds, _, _ = socket.recv_fds(self.control, 1 << 20, 4)
            except ConnectionError:
                message, fds = b"", []
            if not message:
                raise SystemExit(0)  # the test process is gone
            return json.loads(message), fds, None
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(5)
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            asker, uid, _ = struct.unpack("3i", creds)
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 256)
        if uid != os.getuid() or not message:
            raise ValueError("a request from another user, or none")
        return json.loads(message), fds, asker

    def _fork(
        self, request: dict[str, Any], fds: list[int], asker: int | None
    ) -> tuple[dict[str, Any], int, list[int]] | None:
        if request["kind"] not in ("cli", "spawn") or len(fds) < 4:
            raise ValueError(f"not a request: {request.get('kind')!r}, {len(fds)} descriptors")
        reply, *rest = fds
        pid = os.fork()
        if pid == 0:
            return request, reply, rest  # the child says its pid once it is set up
        for fd in rest:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, reply)
        self.sel.register(pidfd, selectors.EVENT_READ)
        if asker is not None:
            try:
                watch = os.pidfd_open(asker)
            except ProcessLookupError:
                os.kill(pid, signal.SIGKILL)
            else:
                self.askers[watch] = pid
                self.watches[pid] = watch
                self.sel.register(watch, selectors.EVENT_READ)
        return None

    def _ended(self, pidfd: int) -> None:
        if pidfd in self.askers:  # a spawn's `python` died first: its child goes with it
            os.kill(self.askers[pidfd], signal.SIGKILL)  # not reaped yet: still that child
            self._unwatch(self.askers[pidfd])
            return
        self.sel.unregister(pidfd)
        pid, reply = self.children.pop(pidfd)
        _, status = os.waitpid(pid, 0)
        self._unwatch(pid)
        with contextlib.suppress(OSError):
            os.write(reply, b"exit %d" % status)
        os.close(reply)
        os.close(pidfd)

    def _unwatch(self, pid: int) -> None:
        watch = self.watches.pop(pid, None)
        if watch is not None:
            del self.askers[watch]
            self.sel.unregister(watch)
            os.close(watch)

    def close_in_child(self) -> None:
        """What only the zygote uses, closed in a child."""
        self.sel.close()
        self.control.close()
        self.listener.close()
        for pidfd, (_, other) in self.children.items():
            os.close(pidfd)
            os.close(other)
        for watch in self.askers:
            os.close(watch)


def _settle(reply: int, streams: list[int], keep: list[int], wanted: list[int]) -> int:
    """Streams onto 0, 1 and 2, each kept descriptor onto the number it is wanted at, and
    the reply descriptor above them all (returned). Everything moves up past the wanted
    numbers first, so that no move lands on a descriptor not moved yet."""
    base = max([HIGH, *(w + 1 for w in wanted)])
    moved = fcntl.fcntl(reply, fcntl.F_DUPFD, base)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, base) for fd in keep]
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
    for fd in {reply, *streams, *keep}:
        if fd > 2:
            os.close(fd)
    for fd, target in zip(high, wanted, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    return moved


def _say_pid(reply: int) -> None:
    """The child is set up: its pid to whoever asked (a signal from now on finds it as
    asked: in its session, in its directory)."""
    with contextlib.suppress(OSError):
        os.write(reply, b"pid %d" % os.getpid())
    os.close(reply)


def _become(request: dict[str, Any], reply: int) -> None:
    """The request's directory and environment; a directory that cannot be entered ends
    the child, told to the test as the error (as subprocess raises it in its parent)."""
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(reply, f"error {exc}".encode()[:4000])
        os._exit(127)
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
    except BaseException:  # the zygote ends (its test process did, or it failed)
        shutil.rmtree(zygote.folder, ignore_errors=True)
        raise
    # A child from here on.
    zygote.close_in_child()
    multiprocessing.set_executable(zygote.python)  # what it spawns is forked here too
    streams, keep = fds[:3], fds[3:]
    if request["kind"] == "cli":
        reply = _settle(reply, streams, [], [])
        if request["new_session"]:
            os.setsid()
        _become(request, reply)
        _say_pid(reply)
        sys.argv = [bot.cli.__file__, *request["args"]]
        sys.path[0] = os.getcwd()  # as -m sets it
        del sys.modules["bot.cli"]  # as -m finds it: not imported yet (runpy warns otherwise)
        runpy.run_module("bot.cli", run_name="__main__", alter_sys=True)
        return
    reply = _settle(reply, streams, keep, request["keep"])
    _become(request, reply)
    with contextlib.suppress(ValueError, OSError):  # its parent's, as a spawn inherits them
        resource.setrlimit(resource.RLIMIT_NOFILE, tuple(request["nofile"]))
    _say_pid(reply)
    sys.argv = request["argv"]
    del sys.modules["bot.cli"]  # multiprocessing imports serve's main module afresh
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    exec(compile(request["code"], "<string>", "exec"), main_module.__dict__)
