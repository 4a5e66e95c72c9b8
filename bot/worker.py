"""serve's background worker: alert processing, the outbox relays and the durable
scheduler, in a process of their own beside the HTTP front (on PostgreSQL).

One event loop cannot both answer Alertmanager at a thousand notifications a second and
process them, post, and run the scheduler: each costs CPU the other's answers wait for.
So ``queuebot serve`` starts this worker itself (one command still runs everything, no
setting needed). The front stores each notification (committed before its 200) and tells
the worker over a socket pair that there is work; the worker processes what is stored.
Nothing is handed over in memory, so nothing acknowledged is lost when either process
dies: the inbox and the outbox are in the database, claimed with ``SKIP LOCKED``.

- The front sends one byte per wake: ``a`` (notifications stored), ``o`` (outbox items
  committed). A wake that cannot be written at once is dropped: a full socket means the
  worker has wakes to read, and its passes also poll every second.
- The worker sends, once a second, the alert posts and detector firings it counted (one
  JSON line), so the front's ``GET /metrics`` shows them.
- The worker stops when the front closes its end (a stop, or the front died); it ignores
  SIGINT (Ctrl-C reaches the whole process group; the front stops it in order) and stops
  on SIGTERM. A worker that dies is started again, after a pause that grows while it keeps
  dying.
- It runs at a lower CPU priority (nice 5): when the machine is busy, answering
  Alertmanager comes first; processing catches up behind it.

SQLite allows one writer at a time, so there serve keeps everything in its one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError

from bot.boards import board_surfaces
from bot.bootstrap import App, build_app
from bot.discord.setup import discord_notifier
from bot.heap import settle_heap
from bot.logs import setup_logging
from bot.readers import attach_slack_reader
from bot.running import running_scheduler
from bot.slack.app import web_client
from bot.slack.notifier import SlackNotifier
from bot.slack.pacing import ChannelPacer
from services.config import Config
from services.db import error_line
from services.errors import QueuebotError
from services.notify import FanoutNotifier, Notifier
from services.outbox import Reach

if TYPE_CHECKING:
    from bot.discord.notifier import DiscordNotifier

log = logging.getLogger("queuebot.worker")
WAKE_ALERTS = b"a"
WAKE_OUTBOX = b"o"
COUNT_EVERY = 1.0  # seconds between the worker's counts to the front
# Below the front: what is acknowledged (a webhook's 200, a slash command's ack) comes
# first, posting after. At 10 the worker keeps about a tenth of a CPU it shares with a busy
# front (at 5 it took a quarter, and the webhook's p99 went over 50 ms on two cores).
NICE = 10
STOP_WAIT = 30.0  # seconds the front waits for the worker to finish its pass
RESTART_FIRST, RESTART_MOST = 1.0, 60.0  # pause before starting a dead worker again
HEALTHY_AFTER = 60.0  # a worker that ran this long had no trouble starting
RECENT = 600.0  # /readyz tells the worker's ends of the last this many seconds
COUNTED = ("queuebot_alert_posts", "queuebot_detector_firings")


def chat_notifier(config: Config, discord: DiscordNotifier | None = None) -> FanoutNotifier | None:
    """Where plans, alerts and incidents post: every platform that is configured."""
    platforms: list[tuple[str, Notifier]] = []
    if config.env.slack_bot_token is not None:
        channels = {name: c.slack for name, c in config.file.channels.items() if c.slack}
        pacer = ChannelPacer(config.file.slack.post_interval_seconds)
        slack = SlackNotifier(
            web_client(config.env),
            channels,
            pacer=pacer,
            buttons=not config.file.slack.posting_only,  # no click could ever arrive
        )
        platforms.append(("slack", slack))
    if discord is not None:
        platforms.append(("discord", discord))
    return FanoutNotifier(platforms) if platforms else None


def chat_reach(posts: FanoutNotifier | None) -> Reach:
    """Where serve's outbox relays deliver: every channel of the platforms it posts to,
    and posts without a destination. Never a console session's: only that console can
    print them, so serve leaves them for it (never tried, never given up)."""
    return Reach(platforms=posts.platforms if posts is not None else frozenset())


def in_worker(app: App) -> bool:
    """Whether serve runs the background work in a worker process (PostgreSQL)."""
    return app.state_engine.dialect.name == "postgresql"


# -- the front's side ----------------------------------------------------------------------


class Worker:
    """The front's handle on its worker process: starts it, wakes it, reads its counts,
    starts it again when it dies, stops it."""

    def __init__(self, config: Config, app: App) -> None:
        self.config = config
        self.app = app
        self._proc: BaseProcess | None = None
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._wakes: set[bytes] = set()
        self._stopping = False
        self._started_at = 0.0
        self._pause = RESTART_FIRST
        self._restart: asyncio.TimerHandle | None = None
        self._closed = asyncio.Event()  # the worker closed its end (its last counts read)
        self._ends: deque[tuple[float, int | None]] = deque(maxlen=100)  # (when, exit code)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        context = multiprocessing.get_context("spawn")  # a fresh interpreter, no copied loop
        proc = context.Process(
            target=work,
            args=(self.config, theirs, logging.getLogger().level),
            name="queuebot-worker",
            daemon=False,
        )
        try:
            proc.start()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        theirs.close()
        self._proc, self._sock, self._buffer = proc, ours, b""
        self._closed.clear()
        self._started_at = time.monotonic()
        loop.add_reader(ours.fileno(), self._readable)
        loop.add_reader(proc.sentinel, self._ended)
        log.info("background worker started (pid %s)", proc.pid)

    def wake_alerts(self) -> None:
        self._send(WAKE_ALERTS)

    def wake_outbox(self) -> None:
        self._send(WAKE_OUTBOX)

    def _send(self, wake: bytes) -> None:
        """Wakes asked for in one turn of the event loop go out as one write (a busy
        front stores a batch of notifications per commit, each asking)."""
        if not self._wakes:
            asyncio.get_running_loop().call_soon(self._flush)
        self._wakes.add(wake)

    def _flush(self) -> None:
        wakes, self._wakes = b"".join(sorted(self._wakes)), set()
        if self._sock is None:
            return
        with contextlib.suppress(BlockingIOError, ConnectionError):
            self._sock.send(wakes)

    def _readable(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._detach_socket()
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._count(line)

    def _count(self, line: bytes) -> None:
        try:
            counts = json.loads(line)
            posts, firings = counts["posts"], counts["firings"]
        except (ValueError, KeyError, TypeError):
            log.warning("background worker sent counts that are not counts: %r", line[:200])
            return
        for kind, n in posts.items():
            for _ in range(int(n)):
                self.app.metrics.alert_posted(str(kind))
        for detector, n in firings.items():
            for _ in range(int(n)):
                self.app.metrics.detector_fired(str(detector))

    def _detach_socket(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self._closed.set()

    def _ended(self) -> None:
        proc = self._proc
        assert proc is not None
        loop = asyncio.get_running_loop()
        loop.remove_reader(proc.sentinel)
        proc.join()
        self._detach_socket()
        self._proc = None
        if self._stopping:
            return
        self._ends.append((time.monotonic(), proc.exitcode))
        if time.monotonic() - self._started_at > HEALTHY_AFTER:
            self._pause = RESTART_FIRST
        log.error(
            "background worker (pid %s) ended with exit code %s: alert processing and posts "
            "wait; starting it again in %.0f s",
            proc.pid,
            proc.exitcode,
            self._pause,
        )
        self._again_later()

    def _again_later(self) -> None:
        """Start the worker again after the pause, which doubles (up to ``RESTART_MOST``)
        for the next time."""
        loop = asyncio.get_running_loop()
        self._restart = loop.call_later(self._pause, self._start_again)
        self._pause = min(self._pause * 2, RESTART_MOST)

    def describe(self) -> str:
        """What ``GET /readyz`` says of the worker: running or not (and when it starts
        again), and how often it ended lately. A worker that is down does not make the
        process unready: its front still stores and acknowledges, and what is stored
        waits in the database for this worker, or another replica's, to process."""
        now = time.monotonic()
        ends = [(at, code) for at, code in self._ends if now - at <= RECENT]
        lately = ""
        if ends:
            at, code = ends[-1]
            how = f"with exit code {code}" if code is not None else "(could not be started)"
            lately = (
                f"; ended {len(ends)} time(s) in the last {RECENT / 60:.0f} minutes, "
                f"last {now - at:.0f} s ago {how}"
            )
        proc = self._proc
        if self._stopping:
            return "stopping"
        if proc is not None and proc.is_alive():
            return f"running (pid {proc.pid}){lately}"
        if self._restart is not None:
            left = max(0.0, self._restart.when() - asyncio.get_running_loop().time())
            return f"not running: starting again in {left:.0f} s{lately}"
        return f"not running{lately}"

    def _start_again(self) -> None:
        self._restart = None
        if self._stopping:
            return
        try:
            self.start()
        except Exception as exc:  # no process could be made (out of memory, a limit)
            self._ends.append((time.monotonic(), None))
            log.error(
                "background worker could not be started again (%s): trying again in %.0f s",
                exc,
                self._pause,
            )
            self._again_later()

    async def stop(self) -> None:
        """Close the worker's socket (it finishes its pass and ends) and wait for it."""
        self._stopping = True
        if self._restart is not None:
            self._restart.cancel()
        proc = self._proc
        if proc is not None:
            asyncio.get_running_loop().remove_reader(proc.sentinel)
        if self._sock is not None:  # its last counts first
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)  # the worker reads its end of file
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), STOP_WAIT)
            self._detach_socket()
        if proc is None:
            return
        await asyncio.to_thread(proc.join, STOP_WAIT)
        if proc.exitcode is None:
            log.warning("background worker (pid %s) did not stop in time; killed", proc.pid)
            proc.kill()
            await asyncio.to_thread(proc.join)
        self._proc = None


class Background:
    """What ``GET /readyz`` says of serve's background work (``worker``): filled in by
    ``background`` when the work starts."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.in_process = False

    def __call__(self) -> str:
        if self.worker is not None:
            return self.worker.describe()
        return "in this process (SQLite)" if self.in_process else "not started"


@asynccontextmanager
async def background(
    config: Config, app: App, state: Background | None = None
) -> AsyncIterator[None]:
    """Run alert processing, the outbox relays and the scheduler for as long as the block
    lasts: in a worker process on PostgreSQL, in this process on SQLite. ``state`` is
    told which, and is given the worker."""
    state = state or Background()
    if not in_worker(app):
        state.in_process = True
        async with running_scheduler(app):
            yield
        return
    worker = Worker(config, app)
    state.worker = worker
    app.alerts.forward_wakes(worker.wake_alerts)
    app.outbox.forward_wakes(worker.wake_outbox)
    worker.start()
    try:
        yield
    finally:
        await worker.stop()


# -- the worker's side ---------------------------------------------------------------------


def work(config: Config, sock: socket.socket, level: int) -> None:
    """The worker process: runs until the front closes its end or SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup_logging(level)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    try:
        asyncio.run(_work(config, sock))
    except QueuebotError as exc:
        log.error("background worker stopped: %s", exc.message)
        sys.exit(1)
    except DBAPIError as exc:  # the database went away under it: one line, serve restarts it
        log.error("background worker stopped: the database cannot be reached (%s)", error_line(exc))
        sys.exit(1)


async def _work(config: Config, sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    sock.setblocking(False)
    discord_posts = discord_notifier(config, rest_only=True)  # no gateway here: REST
    posts = chat_notifier(config, discord_posts)
    app = await build_app(
        config,
        notifier=posts,
        migrate=False,
        announce=False,
        reach=chat_reach(posts),
        surfaces=board_surfaces(config, posts),
    )
    attach_slack_reader(config, app)  # the App Homes' roles from user groups
    settle_heap()
    try:

        def readable() -> None:
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # the front stops, or died
                loop.remove_reader(sock.fileno())
                stop.set()
                return
            if WAKE_ALERTS in data:
                app.alerts.wake()
            if WAKE_OUTBOX in data:
                app.outbox.wake()

        loop.add_reader(sock.fileno(), readable)
        counts = _Counts(app)
        async with running_scheduler(app):
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), COUNT_EVERY)
                await counts.send(sock)
        await counts.send(sock)  # what the last pass posted
    finally:
        try:
            await app.close()
        finally:
            if posts is not None:
                await posts.close()  # kept-alive connections to Slack, Discord's REST login
            sock.close()


class _Counts:
    """What the worker counted since it last told the front."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.told: dict[str, Counter[str]] = {name: Counter() for name in COUNTED}

    def _now(self) -> dict[str, Counter[str]]:
        now: dict[str, Counter[str]] = {name: Counter() for name in COUNTED}
        for family in self.app.metrics.registry.collect():
            if family.name not in now:
                continue
            for sample in family.samples:
                label = next(iter(sample.labels.values()), "")
                now[family.name][label] += int(sample.value)
        return now

    async def send(self, sock: socket.socket) -> None:
        now = self._now()
        news = {name: now[name] - self.told[name] for name in COUNTED}
        if not any(news.values()):
            return
        line: dict[str, Any] = {
            "posts": dict(news["queuebot_alert_posts"]),
            "firings": dict(news["queuebot_detector_firings"]),
        }
        with contextlib.suppress(OSError):
            await asyncio.get_running_loop().sock_sendall(sock, json.dumps(line).encode() + b"\n")
            self.told = now
