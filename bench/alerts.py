"""Alertmanager's webhook under load: 20,000 notifications over 500 groups, 50 senders.

Builds a scratch PostgreSQL database of its own (``qb_bench_alerts_<pid>_<random>``,
migrated, with the demo estate; dropped at the end) or, with ``--sqlite``, a SQLite file,
starts the local fake Slack (``testkit/fake_slack.py``) and the real ``queuebot serve``
as a subprocess, and sends Alertmanager's webhook notifications to ``POST
/alerts/alertmanager`` from a separate process (50 asyncio tasks, one aiohttp keep-alive
session each), so the load generator never shares serve's interpreter.

Each group gets 40 notifications in order, all from one sender, as Alertmanager sends
them: #1 fires alert A, #2-#15 repeat it, #16 adds alert B, #17-#30 repeat both firing,
#31 resolves both, #32-#40 repeat the resolution. Each sender has 10 groups and sends
their notifications interleaved (#1 of each, then #2 of each, ...), one request at a time.

It prints the wall time of the sending, notifications/s, the client-side latency per
request (p50/p95/p99/max), the non-200 answers, then waits (``--wait`` s) until every
stored notification is processed and the outbox is drained, and prints the processing
lag (last answer -> all processed and delivered), the chat posts the fake Slack got
(chat.postMessage + chat.update) and the posts real changes call for: per group the root,
the "added" reply with its root update, and the "resolved" reply with its root update, so
5 per group, less those the outbox superseded while they were queued (an "added" reply
by the resolution, a root update by a newer one). Targets: >= 1,000 notifications/s, p99
< 50 ms, no non-200, posts + superseded == expected, everything processed within
``--wait``.

Posting is not paced during the bench: its config sets ``[slack] post_interval_seconds =
0`` (Slack takes about one post per second per channel; at that pace 2,500 posts to one
channel take about 42 minutes, which would measure the pacing, not queuebot). The
built-in detectors are off, so every post counted is one of the bench's groups.

    .venv/bin/python -m bench.alerts                      # PostgreSQL, 20,000 / 500 / 50
    .venv/bin/python -m bench.alerts --sqlite             # the same on SQLite
    .venv/bin/python -m bench.alerts --notifications 4000 --groups 100 --senders 20
    .venv/bin/python -m bench.alerts --profile serve.prof # cProfile serve while it works

Exit status: 0 when every target is met, 1 when one is missed, 2 on error, 130 when
interrupted (Ctrl-C or SIGTERM; serve, the senders, the fake and the database are cleaned
up).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import pstats
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from bench.kit.alertmanager import group_bodies, sequence
from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import Sched, judge, loadavg, machine_busy, percentile, settle, spread
from bench.kit.scratch import create, drop
from bench.kit.serve import (
    ALERT_TOKEN,
    DETECTORS_OFF,
    Serve,
    build_demo,
    die_with_parent,
    slack_env,
    start_app,
    start_serve,
    wait_healthy,
)
from testkit.fake_slack import FakeSlack

DB_PREFIX = "qb_bench_alerts"
NOTIFICATIONS = 20_000
GROUPS = 500
SENDERS = 50
WARMUP = 100
WAIT = 300.0
PATH = "/alerts/alertmanager"
POSTS_PER_GROUP = 5  # root; "added" reply + root update; "resolved" reply + root update
TARGET_RATE = 1000.0  # notifications/s
TARGET_P99_MS = 50.0
POLL = 0.05  # seconds between looks at the backlog

BENCH_CONFIG = (
    """
[slack]
post_interval_seconds = 0        # the bench measures queuebot, not Slack's pace
"""
    + DETECTORS_OFF
)


# -- the notifications -----------------------------------------------------------------------


def sender_work(
    sender: int, *, groups: int, per_group: int, senders: int, base: datetime
) -> list[bytes]:
    """One sender's bodies in sending order: its groups (every ``senders``-th one),
    interleaved, each group's in its own order."""
    mine = list(range(sender, groups, senders))
    bodies = {g: sequence(g, base, per_group) for g in mine}
    work = []
    for i in range(per_group):
        work += [bodies[g][i] for g in mine]
    return work


WARMUP_GROUP = 16**12 - 1  # a number no bench group has: fingerprints of its own


def warmup_body(base: datetime) -> bytes:
    """A group of its own, firing and repeated: what warms serve up posts one root."""
    fire, _, _ = group_bodies(WARMUP_GROUP, base, name="BenchWarmup")
    return fire


# -- the sending process ---------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    sent: float  # time.monotonic(): one clock for every process on the machine
    latency: float
    status: int  # 0: no HTTP answer (the error is counted apart)


def sender_main(pipe: Connection, url: str, load: dict[str, int], base: str) -> None:
    """The sending process: warm up, wait for the word, send, report back."""
    die_with_parent()  # a bench killed outright takes its children with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench stops it
    try:
        asyncio.run(_send_all(pipe, url, load, datetime.fromisoformat(base)))
    except (BrokenPipeError, EOFError):  # the bench is gone
        pass
    finally:
        pipe.close()


async def _send_all(pipe: Connection, url: str, load: dict[str, int], base: datetime) -> None:
    senders, warmup = load["senders"], load["warmup"]
    headers = {"content-type": "application/json", "authorization": f"Bearer {ALERT_TOKEN}"}
    target = f"{url}{PATH}"
    errors: Counter[str] = Counter()
    loop = asyncio.get_running_loop()

    async def post(session: aiohttp.ClientSession, body: bytes, out: list[Sample]) -> None:
        started = time.monotonic()
        status = 0
        try:
            async with session.post(target, data=body, headers=headers) as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            errors[type(exc).__name__] += 1
        out.append(Sample(started, time.monotonic() - started, status))

    async def healthz(session: aiohttp.ClientSession) -> None:
        async with session.get(f"{url}/healthz") as response:
            await response.read()

    timeout = aiohttp.ClientTimeout(total=30)
    sessions = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1, keepalive_timeout=60), timeout=timeout
        )
        for _ in range(senders)
    ]
    try:
        await asyncio.gather(*(healthz(s) for s in sessions))  # one connection each, open
        warm: list[Sample] = []
        body = warmup_body(base)
        per_sender = [
            warmup // senders + (1 if i < warmup % senders else 0) for i in range(senders)
        ]

        async def warm_one(session: aiohttp.ClientSession, n: int) -> None:
            for _ in range(n):
                await post(session, body, warm)

        await asyncio.gather(*(warm_one(s, n) for s, n in zip(sessions, per_sender, strict=True)))
        pipe.send({"warm": [(s.latency, s.status) for s in warm], "errors": dict(errors)})
        errors.clear()

        work = [
            sender_work(
                i,
                groups=load["groups"],
                per_group=load["per_group"],
                senders=senders,
                base=base,
            )
            for i in range(senders)
        ]
        # The loop runs while the bench waits for the warm-up's posts: connections serve
        # closed meanwhile (its keep-alive timeout) are noticed, and opened again here.
        if await loop.run_in_executor(None, pipe.recv) != "go":
            return
        await asyncio.gather(*(healthz(s) for s in sessions))
        samples: list[list[Sample]] = [[] for _ in range(senders)]

        async def send(
            session: aiohttp.ClientSession, bodies: list[bytes], out: list[Sample]
        ) -> None:
            for one in bodies:
                await post(session, one, out)

        cpu0 = time.process_time()
        started = time.monotonic()
        await asyncio.gather(
            *(send(s, w, out) for s, w, out in zip(sessions, work, samples, strict=True))
        )
        ended = time.monotonic()
        cpu = time.process_time() - cpu0
        flat = [(s.sent, s.latency, s.status) for out in samples for s in out]
        pipe.send(
            {
                "started": started,
                "ended": ended,
                "samples": flat,
                "errors": dict(errors),
                "cpu": cpu,
            }
        )
    finally:
        await asyncio.gather(*(s.close() for s in sessions))


# -- figures ---------------------------------------------------------------------------------


def uptime() -> str:
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return f"load average: {loadavg()}"


def cpu_of(pid: int) -> tuple[float, float]:
    """Seconds on a CPU and seconds runnable but waiting for one, of all the threads of a
    process; NaN where /proc does not say."""
    sched = Sched.of(pid)
    return sched.all_cpu, sched.all_waiting


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (serve's worker), from /proc."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        pass
    return found


def cpu_of_children(pid: int) -> tuple[float, float]:
    """``cpu_of`` summed over the processes ``pid`` started (0 when it started none)."""
    on = waiting = 0.0
    for child in children(pid):
        child_on, child_waiting = cpu_of(child)
        if child_on == child_on:  # not NaN: it was still there
            on += child_on
            waiting += child_waiting
    return on, waiting


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """Every process's name and CPU seconds so far (/proc/PID/stat: utime + stime)."""
    found: dict[int, tuple[str, float]] = {}
    hz = os.sysconf("SC_CLK_TCK")
    with contextlib.suppress(OSError):
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (proc / "stat").read_text()
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                found[int(proc.name)] = (name, (int(fields[11]) + int(fields[12])) / hz)
    return found


@dataclass
class Usage:
    """CPU seconds (on a CPU, runnable but waiting) of serve's threads, of the sending
    process and of this one (the fake Slack, the polling); of every process by name (the
    PostgreSQL server and its backends, other work) and of the whole machine."""

    serve: tuple[float, float]
    worker: tuple[float, float]  # serve's worker process (PostgreSQL), 0 without one
    sender: tuple[float, float]
    bench: tuple[float, float]
    processes: dict[int, tuple[str, float]]
    machine: float
    at: float

    @staticmethod
    def now(serve: int, sender: int) -> Usage:
        return Usage(
            cpu_of(serve),
            cpu_of_children(serve),
            cpu_of(sender),
            cpu_of(os.getpid()),
            cpu_by_process(),
            machine_busy()[0],
            time.monotonic(),
        )

    def postgres(self, before: Usage) -> float:
        return sum(
            cpu - before.processes.get(pid, (name, 0.0))[1]
            for pid, (name, cpu) in self.processes.items()
            if name == "postgres"
        )

    def others(self, before: Usage, ours: set[int]) -> list[tuple[str, float]]:
        """Other processes' CPU seconds in between, by name, most first (those that
        ended in between are in the machine's busy time only)."""
        by_name: dict[str, float] = {}
        for pid, (name, cpu) in self.processes.items():
            if pid not in ours and name != "postgres":
                spent = cpu - before.processes.get(pid, (name, 0.0))[1]
                by_name[name] = by_name.get(name, 0.0) + spent
        most = sorted(by_name.items(), key=lambda item: -item[1])[:3]
        return [(name, cpu) for name, cpu in most if cpu >= 0.5]

    def since(self, before: Usage, what: str, *, ours: set[int], sending: bool = True) -> str:
        wall = self.at - before.at
        cpus = os.cpu_count() or 1
        busy = self.machine - before.machine
        serve = self.serve[0] - before.serve[0]
        worker = self.worker[0] - before.worker[0]
        sender = self.sender[0] - before.sender[0] if sending else 0.0
        bench = self.bench[0] - before.bench[0]
        postgres = self.postgres(before)
        others = self.others(before, ours)
        return (
            f"CPU {what} ({wall:.2f}s, {cpus} CPUs): machine busy {busy:.2f}s "
            f"({busy / (wall * cpus):.0%})\n"
            f"  queuebot serve {serve:.2f}s on a CPU ({serve / wall:.0%} of one), "
            f"{self.serve[1] - before.serve[1]:.2f}s runnable but waiting for one\n"
            f"  serve's worker {worker:.2f}s on a CPU ({worker / wall:.0%} of one), "
            f"{self.worker[1] - before.worker[1]:.2f}s runnable but waiting for one\n"
            f"  PostgreSQL {postgres:.2f}s"
            + (f", senders {sender:.2f}s" if sending else "")
            + f", this process (fake Slack, polling) {bench:.2f}s, "
            f"everything else {busy - serve - worker - sender - bench - postgres:.2f}s"
            + (
                f" (of it, live processes: {', '.join(f'{n} {c:.1f}s' for n, c in others)})"
                if others
                else ""
            )
        )


# -- the database ----------------------------------------------------------------------------


class Backlog:
    """What is still to do, read straight from the database."""

    INBOX = "SELECT count(*) FROM qb_alert_inbox WHERE processed_at IS NULL"
    OUTBOX = "SELECT count(*) FROM qb_outbox WHERE done_at IS NULL"

    def __init__(self, *, pg: str | None = None, sqlite: Path | None = None) -> None:
        self._pg = psycopg.connect(pg, autocommit=True) if pg else None
        self._sqlite = sqlite3.connect(sqlite, timeout=30) if sqlite else None

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self._pg is not None:
            return list(self._pg.execute(sql).fetchall())
        assert self._sqlite is not None
        return list(self._sqlite.execute(sql).fetchall())

    def _one(self, sql: str) -> int:
        rows = self._rows(sql)
        return int(rows[0][0]) if rows else 0

    def counts(self) -> tuple[int, int]:
        """(unprocessed notifications, undelivered posts)"""
        return self._one(self.INBOX), self._one(self.OUTBOX)

    def groups(self) -> Counter[str]:
        """The bench's groups by status."""
        rows = self._rows(
            "SELECT status, count(*) FROM qb_alert_groups "
            "WHERE alertname LIKE 'BenchAlert%' GROUP BY status"
        )
        return Counter({str(status): int(n) for status, n in rows})

    def stored(self) -> int:
        return self._one("SELECT count(*) FROM qb_alert_inbox")

    def superseded(self) -> int:
        """The bench groups' posts the outbox collapsed (a newer one made them stale)."""
        return self._one(
            "SELECT count(*) FROM qb_outbox o JOIN qb_alert_groups g "
            "ON o.subject = 'alert:' || g.id WHERE o.superseded_by IS NOT NULL "
            "AND g.alertname LIKE 'BenchAlert%'"
        )

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()
        if self._sqlite is not None:
            self._sqlite.close()

    def drain(self, within: float) -> tuple[float | None, float | None, tuple[int, int]]:
        """Wait until the inbox is processed and the outbox drained: the monotonic times
        the inbox, then both, were first seen empty (None: not within ``within`` s), and
        the counts last seen."""
        deadline = time.monotonic() + within
        inbox_done: float | None = None
        while True:
            now = time.monotonic()
            counts = self.counts()
            if counts[0] == 0 and inbox_done is None:
                inbox_done = now
            if counts == (0, 0):
                return inbox_done, now, counts
            if now > deadline:
                return inbox_done, None, counts
            time.sleep(POLL)


# -- serve -----------------------------------------------------------------------------------


PROFILED_SERVE = """
import cProfile, signal, sys
from bot.cli import main

profile = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
def stop(*_):
    profile.disable()
    profile.dump_stats(sys.argv[1])
signal.signal(signal.SIGUSR2, stop)
sys.exit(main(sys.argv[2:]))
"""


def start(
    workdir: Path, db_url: str, fake: FakeSlack, log_level: str, profile: Path | None
) -> Serve:
    """serve, under cProfile (on between SIGUSR1 and SIGUSR2) with ``profile``; guarded:
    started before any thread (the fake's) runs."""
    python = ("-c", PROFILED_SERVE, str(profile)) if profile is not None else ("-m", "bot.cli")
    return start_serve(
        workdir,
        db_url,
        env=slack_env(fake),
        config=BENCH_CONFIG,
        log_level=log_level,
        python=python,
        guard=True,
    )


def posts(fake: FakeSlack) -> Counter[str]:
    made = Counter[str]()
    for call in fake.recorded("/api/chat."):
        if call.path in ("/api/chat.postMessage", "/api/chat.update"):
            made[call.path.removeprefix("/api/")] += 1
    return made


# -- the run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def sending_process(
    url: str, load: dict[str, int], base: datetime
) -> Iterator[tuple[BaseProcess, Connection]]:
    # spawn, not fork: the fake Slack's thread is running in this process
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    proc = context.Process(
        target=sender_main, args=(theirs, url, load, base.isoformat()), name="bench-senders"
    )
    proc.start()
    theirs.close()
    try:
        yield proc, ours
        proc.join(timeout=10)  # it closes its sessions and ends
    finally:
        ours.close()
        if proc.is_alive():  # interrupted, or stuck
            proc.terminate()
            proc.join(timeout=10)


def receive(
    pipe: Connection, proc: BaseProcess, within: float, *, tick: Callable[[], None] | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while not pipe.poll(POLL * 5 if tick else POLL):
        if tick is not None:
            tick()
        if not proc.is_alive():
            raise RuntimeError(f"the sending process ended (exit {proc.exitcode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sending process said nothing in {within:.0f}s")
    answer: dict[str, Any] = pipe.recv()
    return answer


FLOOR_APP = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

stored = 0

async def alerts(request):
    global stored
    await request.body()
    stored += 1
    return JSONResponse({"stored": stored})

async def healthz(request):
    return JSONResponse({"status": "ok"})

app = Starlette(routes=[Route("/alerts/alertmanager", alerts, methods=["POST"]),
                        Route("/healthz", healthz)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), lifespan="off",
            log_level="warning", access_log=False)
"""


def harness_floor(
    args: argparse.Namespace, load: dict[str, int], base: datetime, workdir: Path
) -> None:
    """The same senders and notifications against a bare uvicorn + Starlette app that
    answers 200 at once, as serve's HTTP stack does (no queuebot, no database): what the
    client, uvicorn and this machine cost by themselves, the floor under every figure."""
    floor = start_app(workdir, FLOOR_APP, guard=True)
    proc = floor.proc
    try:
        wait_healthy(floor)
        with sending_process(floor.url, load, base) as (sender, pipe):
            receive(pipe, sender, 120)
            settle(within=0.0 if args.smoke else 20.0)
            before = Usage.now(proc.pid, sender.pid or 0)
            pipe.send("go")
            sent = receive(pipe, sender, args.wait + 600)
            after = Usage.now(proc.pid, sender.pid or 0)
    finally:
        floor.stop()
    samples = sent["samples"]
    wall = sent["ended"] - sent["started"]
    non_200 = sum(1 for _, _, status in samples if status != 200)
    print(
        f"harness floor (a bare uvicorn + Starlette app answering 200, the same senders): "
        f"{len(samples):,} in {wall:.2f}s, {len(samples) / wall:,.0f}/s, "
        f"{spread([lat for _, lat, _ in samples])}"
        + (f", {non_200} non-200" if non_200 else "")
        + f"\n  per request the app {(after.serve[0] - before.serve[0]) / len(samples) * 1000:.2f} "
        f"ms CPU, the senders {(after.sender[0] - before.sender[0]) / len(samples) * 1000:.2f} "
        f"ms; machine busy {(after.machine - before.machine) / (wall * (os.cpu_count() or 1)):.0%}"
    )


def run(args: argparse.Namespace, db_url: str, workdir: Path, backlog: Backlog) -> int:
    load = {
        "groups": args.groups,
        "per_group": args.notifications // args.groups,
        "senders": args.senders,
        "warmup": args.warmup,
    }
    base = (datetime.now(UTC) - timedelta(minutes=10)).replace(microsecond=0)
    fake = FakeSlack()  # bound, not yet serving: no thread runs while serve is forked
    serve: Serve | None = None
    spy: subprocess.Popen[bytes] | None = None
    keep_log = fake_started = False
    try:
        if not args.no_floor:  # before serve and the fake: nothing else of ours runs
            harness_floor(args, load, base, workdir)
        serve = start(workdir, db_url, fake, args.log_level, args.profile)
        fake.start()
        fake_started = True
        t0 = time.monotonic()
        wait_healthy(serve)
        print(
            f"queuebot serve up in {time.monotonic() - t0:.1f}s (pid {serve.proc.pid}) on "
            f"{'SQLite' if args.sqlite else 'PostgreSQL'}; [slack] post_interval_seconds = 0: "
            "posts are not paced at Slack's ~1/s per channel during the bench; the built-in "
            "detectors are off"
        )
        with sending_process(serve.url, load, base) as (proc, pipe):
            t0 = time.monotonic()
            warm = receive(pipe, proc, 120)
            warm_bad = [s for _, s in warm["warm"] if s != 200]
            inbox_done, drained, counts = backlog.drain(args.wait)
            if warm_bad or warm["errors"] or drained is None:
                print(f"warm-up failed: non-200 {Counter(warm_bad)}, {warm['errors']}, {counts}")
                keep_log = True
                return 2
            baseline = posts(fake)
            print(
                f"warm-up: {len(warm['warm'])} notifications of one group from "
                f"{args.senders} senders, processed and posted in {time.monotonic() - t0:.1f}s "
                f"({sum(baseline.values())} post)"
            )
            settle(within=0.0 if args.smoke else 20.0)
            print(f"before: {uptime()}")
            load_before = loadavg()
            per_group = load["per_group"]
            print(
                f"sending {per_group * args.groups:,} notifications over {args.groups:,} groups "
                f"({per_group} each) from {args.senders} senders (another process, one aiohttp "
                "keep-alive session each)",
                flush=True,
            )
            max_backlog = [0, 0]

            def look() -> None:
                inbox, outbox = backlog.counts()
                max_backlog[0] = max(max_backlog[0], inbox)
                max_backlog[1] = max(max_backlog[1], outbox)

            if args.profile is not None:
                serve.proc.send_signal(signal.SIGUSR1)
            if args.py_spy is not None:
                spy = start_py_spy(serve.proc.pid, args.py_spy)
            usage0 = Usage.now(serve.proc.pid, proc.pid or 0)
            pipe.send("go")
            sent = receive(pipe, proc, args.wait + 600, tick=look)
            sent["pids"] = [serve.proc.pid, proc.pid or 0, *([spy.pid] if spy else [])]
            usage1 = Usage.now(serve.proc.pid, proc.pid or 0)
            inbox_done, drained, counts = backlog.drain(args.wait)
            usage2 = Usage.now(serve.proc.pid, proc.pid or 0)
            if args.profile is not None:
                serve.proc.send_signal(signal.SIGUSR2)
            if spy is not None:
                stop_py_spy(spy)
                spy = None
            load_after = loadavg()
            print(f"after: {uptime()}")
        return report(
            args,
            sent,
            fake,
            backlog,
            baseline=baseline,
            inbox_done=inbox_done,
            drained=drained,
            counts=counts,
            max_backlog=(max_backlog[0], max_backlog[1]),
            usage=(usage0, usage1, usage2),
            loads=(load_before, load_after),
        )
    except BaseException:
        keep_log = True
        raise
    finally:
        if serve is not None:
            serve.stop()
            log = serve.log.read_text(errors="replace")
            tracebacks = log.count("Traceback")
            errors = sum(1 for line in log.splitlines() if " ERROR " in line)
            warnings = sum(1 for line in log.splitlines() if " WARNING " in line)
            print(
                f"serve log: {tracebacks} traceback(s), {errors} ERROR line(s), "
                f"{warnings} WARNING line(s)"
            )
            keep_log = keep_log or bool(tracebacks or errors)
        if fake_started:
            fake.stop()
        if spy is not None:  # interrupted while it recorded
            spy.kill()
            spy.wait()
        if args.profile is not None and args.profile.exists():
            show_profile(args.profile)
        if args.py_spy is not None and args.py_spy.exists():
            show_samples(args.py_spy)
        if keep_log or args.keep_log:
            print(f"serve log kept in {workdir / 'serve.log'}")
            args.keep_workdir = True


def report(
    args: argparse.Namespace,
    sent: dict[str, Any],
    fake: FakeSlack,
    backlog: Backlog,
    *,
    baseline: Counter[str],
    inbox_done: float | None,
    drained: float | None,
    counts: tuple[int, int],
    max_backlog: tuple[int, int],
    usage: tuple[Usage, Usage, Usage],
    loads: tuple[str, str],
) -> int:
    samples = sent["samples"]
    wall = sent["ended"] - sent["started"]
    last_answer = max(s + lat for s, lat, _ in samples)
    latencies = [lat for _, lat, _ in samples]
    non_200 = Counter(status for _, _, status in samples if status != 200)
    rate = len(samples) / wall
    expected = args.groups * POSTS_PER_GROUP
    made = posts(fake) - baseline
    total = sum(made.values())
    superseded = backlog.superseded()
    groups = backlog.groups()
    stored = backlog.stored()

    print()
    print(f"sent {len(samples):,} in {wall:.2f}s: {rate:,.0f} notifications/s")
    print(f"latency per request (client side): {spread(latencies)}")
    print(
        f"non-200 answers: {sum(non_200.values())}"
        + (f" {dict(non_200)} (0: no answer: {sent['errors']})" if non_200 else "")
    )
    print(
        f"backlog while sending, at most: {max_backlog[0]:,} notifications unprocessed, "
        f"{max_backlog[1]:,} posts undelivered"
    )
    if drained is not None and inbox_done is not None:
        print(
            f"processing lag (last answer -> all processed and posted): "
            f"{drained - last_answer:.2f}s (inbox processed {inbox_done - last_answer:.2f}s "
            "after the last answer)"
        )
    else:
        print(
            f"not done {args.wait:.0f}s after the last answer: {counts[0]:,} notifications "
            f"unprocessed, {counts[1]:,} posts undelivered"
        )
    print(
        f"chat posts: {total:,} (chat.postMessage {made['chat.postMessage']:,}, chat.update "
        f"{made['chat.update']:,}) and {superseded:,} superseded while queued (an 'added' "
        "reply by the resolution, a root update by a newer one); expected for real changes "
        f"only: {expected:,} ({args.groups} groups x {POSTS_PER_GROUP}: root, 'added' reply "
        "+ root update, 'resolved' reply + root update): "
        f"{'match' if total + superseded == expected else 'MISMATCH'}"
    )
    print(
        f"stored notifications {stored:,} (with the warm-up's {args.warmup}); bench groups: "
        + ", ".join(f"{n} {status}" for status, n in sorted(groups.items()))
    )
    print(f"sending process: {sent['cpu']:.2f}s CPU for {wall:.2f}s of sending")
    ours = {os.getpid(), *sent["pids"], *children(sent["pids"][0])}
    print(usage[1].since(usage[0], "while sending", ours=ours))
    print(usage[2].since(usage[1], "after, until processed and posted", ours=ours, sending=False))
    serve_cpu = usage[2].serve[0] - usage[0].serve[0]
    worker_cpu = usage[2].worker[0] - usage[0].worker[0]
    pg_cpu = usage[2].postgres(usage[0])
    print(
        f"per notification, from the first send until all was posted: queuebot serve "
        f"{serve_cpu / len(samples) * 1000:.2f} ms CPU (its worker "
        f"{worker_cpu / len(samples) * 1000:.2f} ms), PostgreSQL "
        f"{pg_cpu / len(samples) * 1000:.2f} ms"
    )
    print(f"load average {loads[0]} before, {loads[1]} after")

    p99 = percentile(latencies, 0.99) * 1000
    checks = [
        (f"notifications/s {rate:,.0f} >= {TARGET_RATE:,.0f}", rate >= TARGET_RATE),
        (f"latency p99 {p99:.1f} ms < {TARGET_P99_MS:.0f} ms", p99 < TARGET_P99_MS),
        (f"non-200 answers {sum(non_200.values())} == 0", not non_200),
        (
            f"all processed and posted within {args.wait:.0f}s of the last answer",
            drained is not None,
        ),
        (
            f"chat posts {total:,} + superseded {superseded:,} == expected {expected:,}",
            total + superseded == expected,
        ),
    ]
    what = (
        f">= {TARGET_RATE:,.0f} notifications/s, p99 < {TARGET_P99_MS:.0f} ms, zero non-200, "
        "posts + superseded == expected"
    )
    return judge(checks, args.smoke, what)


def show_profile(path: Path, top: int = 30) -> None:
    """serve's event loop thread from the first send until all was posted."""
    print(f"\ncProfile of serve's event loop thread, sending until posted ({path}):")
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


ACTIVITIES = (  # (a frame in the sample's stack, what serve was doing), first match wins
    ("AlertDesk.receive", "webhook: storing (checkout + ping, BEGIN, INSERT, COMMIT)"),
    ("payload.py", "webhook: parsing and validating the body (json, pydantic)"),
    ("AlertmanagerEndpoint.__call__", "webhook: the rest of the endpoint (auth, JSONResponse)"),
    ("uvicorn/protocols", "HTTP around the endpoint (uvicorn, h11, starlette)"),
    ("AlertDesk.process_due", "alert processing (AlertDesk.process_due)"),
    ("AlertPublisher.", "outbox: delivering posts (publisher, Slack client)"),
    ("Outbox.", "outbox: claiming items, marking them done"),
    ("BaseEventLoop._run_once", "event loop (epoll, callbacks, scheduling)"),
)
PACKAGES = (  # (a path fragment of the innermost frame, its package)
    ("psycopg", "psycopg (the driver)"),
    ("sqlalchemy", "sqlalchemy"),
    ("greenlet", "sqlalchemy"),
    ("pydantic", "pydantic"),
    ("h11", "uvicorn + h11"),
    ("uvicorn", "uvicorn + h11"),
    ("starlette", "starlette"),
    ("slack_sdk", "slack_sdk + aiohttp"),
    ("aiohttp", "slack_sdk + aiohttp"),
    ("json", "json"),
    ("asyncio", "asyncio"),
    ("selectors", "asyncio"),
    ("services/", "queuebot"),
    ("bot/", "queuebot"),
)


def show_samples(raw: Path) -> None:
    """py-spy's samples of serve (its raw, collapsed stacks): shares by what serve was
    doing and by the package of the innermost frame. Samples taken inside SQLAlchemy's
    greenlets carry no stack above the greenlet, so they are counted apart."""
    doing: Counter[str] = Counter()
    innermost: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        if not any("bot/cli.py" in f for f in frames[:6]):
            doing["inside SQLAlchemy's greenlets (statements of any of the above)"] += n
        else:
            joined = ";".join(frames)
            what = next((w for key, w in ACTIVITIES if key in joined), "other")
            doing[what] += n
        inner = frames[-1]
        innermost[next((pkg for key, pkg in PACKAGES if key in inner), "other")] += n
    total = sum(doing.values())
    if not total:
        print(f"py-spy recorded no samples ({raw})")
        return
    print(f"\npy-spy samples of serve, sending until posted: {total:,} ({raw})")
    for what, n in doing.most_common():
        print(f"  {n / total:6.1%}  {what}")
    print("  by the package of the innermost frame:")
    for what, n in innermost.most_common():
        print(f"  {n / total:6.1%}  {what}")


def start_py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise RuntimeError("--py-spy needs py-spy: .venv/bin/pip install py-spy")
    return subprocess.Popen(
        [
            found,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--nonblocking",
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop_py_spy(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # it writes what it recorded, then ends
    try:
        _, err = spy.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    if spy.returncode not in (0, -signal.SIGINT):
        print(f"py-spy: {err.decode(errors='replace').strip()[-500:]}")


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.add_argument("--sqlite", action="store_true", help="run on SQLite instead")
    parser.size("--notifications", full=NOTIFICATIONS, smoke=120, help="notifications in all")
    parser.size("--groups", full=GROUPS, smoke=3, help="alert groups")
    parser.size("--senders", full=SENDERS, smoke=3, help="concurrent senders (one connection each)")
    parser.size("--warmup", full=WARMUP, smoke=6, help="notifications of a warm-up group first")
    parser.size(
        "--wait",
        full=WAIT,
        smoke=60.0,
        type=float,
        help="seconds to wait for processing and posting after the last answer",
    )
    parser.serve_options()
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="run serve under cProfile, on from the first send until all is posted; write "
        "the stats to FILE and print the top functions (it slows serve down)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="FILE",
        help="sample serve with py-spy (pip install py-spy) from the first send until all "
        "is posted; write its raw stacks to FILE and print where serve's time went",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the harness floor (a bare app first)"
    )
    args = parser.read(argv)
    per_group = args.notifications // max(args.groups, 1)
    if args.groups < 1 or args.senders < 1 or args.warmup < 0:
        parser.error("--groups and --senders must be at least 1, --warmup at least 0")
    if args.notifications % args.groups or per_group < 3:
        parser.error(
            "--notifications must be a multiple of --groups, at least 3 per group (firing, "
            "another alert added, resolved)"
        )
    if args.profile is not None:
        args.profile = args.profile.resolve()
    if args.py_spy is not None:
        args.py_spy = args.py_spy.resolve()
    args.keep_workdir = False
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="qb_bench_alerts_"))
    name: str | None = None
    backlog: Backlog | None = None
    try:
        if args.sqlite:
            path = workdir / "queuebot.db"
            db_url = f"sqlite+aiosqlite:///{path}"
            build_demo(db_url)
            backlog = Backlog(sqlite=path)
        else:
            name, db_url = create(args.url, DB_PREFIX)
            print(f"scratch database {name}")
            build_demo(db_url)
            backlog = Backlog(pg=db_url.replace("postgresql+psycopg://", "postgresql://", 1))
        return run(args, db_url, workdir, backlog)
    except Exception:  # its traceback follows; the work directory stays to look at
        args.keep_workdir = True
        raise
    finally:
        if backlog is not None:
            backlog.close()
        if name is not None:
            drop(args.url, name)
            print(f"dropped {name}")
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    exit_with(main)
