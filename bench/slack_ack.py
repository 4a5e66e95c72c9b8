"""Slack ack latency under load: 200 signed slash commands, 50 in flight, on 1,000,000 rows.

Starts the local fake Slack (``testkit/fake_slack.py``: the Web API and the
``response_url`` endpoint, recording every call with its monotonic arrival time) and the
real ``queuebot serve`` as a subprocess, pointed at the 1,000,000-row PostgreSQL estate of
``bench.triage`` (database ``qb_bench_triage``). After a warm-up it sends 200 signed
``/queue`` slash commands, at most 50 in flight at once (a sliding window), each over a new
connection with its own trigger_id and response_url, in a fixed shuffled mix of read
commands in equal shares: ``triage --queue workers``, ``triage --queue clips``, ``dlq
--limit 10``, ``stuck --queue workers`` and ``show <id> --queue ...`` of existing jobs.

It measures, per command, the ack latency (request sent -> HTTP response received) and the
answer latency (request sent -> the fake recorded the POST to that command's response_url),
waits up to ``--wait`` seconds after the last ack for the answers, and checks the targets:
ack p99 < 100 ms, no non-200 ack, every answer delivered exactly once, none an error.

To show where ack time goes it also prints:

* the harness floor: the same requests, count and window against a bare uvicorn +
  Starlette app that answers 200 at once (what the client and HTTP stack cost alone);
* acks split by whether answers were being computed when the command was sent;
* two light probes, every 100 ms, idle before the burst and while answers are computed:
  ``GET /healthz`` (the server's event loop, no Bolt) and a signed ``/queue help`` (the
  whole Bolt ack path, no database read); their answers are not counted in the 200;
* CPU: time on a CPU and time runnable but waiting for one (/proc schedstat) of serve's
  event loop thread and of this process, the machine's busy time, runnable tasks, and the
  sessions PostgreSQL opened for the bot.

    .venv/bin/python -m bench.slack_ack                 # bare asyncio streams, as a caller
    .venv/bin/python -m bench.slack_ack --client httpx  # httpx.AsyncClient: a higher floor
    .venv/bin/python -m bench.slack_ack --mix help      # the ack path without estate reads
    .venv/bin/python -m bench.slack_ack --keep          # keep qb_bench_triage if built here

The database: a ``qb_bench_triage`` holding ~1,000,000 rows in both ``dev_r_worker_queue``
and ``queue_messages`` is reused and never dropped; queuebot migrates its own ``qb_*``
tables into it when it starts. A missing one is built with ``python -m bench.triage --keep
--runs 1`` (about a minute) and dropped at the end unless ``--keep`` is given. Another
``--rows`` names another database (``qb_bench_triage_10000``, as ``bench.triage`` keeps it);
``--smoke`` builds one of its own and drops it. One that exists but
holds something else is left alone and the script stops.

Exit status: 0 when every target is met, 1 when one is missed, 2 on error, 130 when
interrupted (Ctrl-C or SIGTERM; serve, the fake and a database built here are cleaned up).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx
import psycopg

from bench.kit.cli import BenchParser, exit_with, names
from bench.kit.figures import (
    P50_P95_P99_MAX,
    P50_P99_MAX,
    Sched,
    judge,
    loadavg,
    machine_busy,
    ms,
    percentile,
    settle,
    spread,
)
from bench.kit.scratch import conninfo, drop, engine_url, exists, unique_name
from bench.kit.serve import Serve, slack_env, start_app, start_serve, wait_healthy
from bench.triage import database_name
from commands.messages import ERROR_TITLES
from testkit.fake_slack import Call, FakeSlack
from testkit.slack_requests import signed, slash_fields

ROOT = Path(__file__).resolve().parents[1]

ROWS = 1_000_000
REQUESTS = 200
CONCURRENCY = 50
WAIT = 60.0
TARGET_ACK_P99_MS = 100.0
SLACK_ACK_DEADLINE = 3.0  # Slack shows "operation_timeout" after this
PROBE_EVERY = 0.1
USERS = ("U0ALICE", "U0BOB", "U0DORA")


# -- signing and bodies ----------------------------------------------------------------------


def slash_body(fake: FakeSlack, text: str, *, name: str, user: str) -> str:
    trigger = f"{name}.{secrets.token_hex(6)}"
    return urlencode(slash_fields(fake, text, name=name, user=user, trigger=trigger))


# -- figures ---------------------------------------------------------------------------------


def runnable() -> int:
    """Tasks running or waiting for a CPU right now (/proc/loadavg's 4th field, minus us)."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return -1


# -- the database ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """What the estate's database holds: rows in dev_r_worker_queue and queue_messages,
    and the size ``bench.triage`` built it for (None: not its build)."""

    workers: int
    clips: int
    built_for: int | None


def held(url: str, name: str) -> Held | None:
    """What the database ``name`` holds; None when it or an estate table is not there."""
    if not exists(url, name):
        return None
    with psycopg.connect(conninfo(url, name), connect_timeout=5) as conn:
        present = conn.execute(
            "SELECT to_regclass('dev_r_worker_queue') IS NOT NULL "
            "AND to_regclass('queue_messages') IS NOT NULL, "
            "to_regclass('qb_bench_meta') IS NOT NULL"
        ).fetchone()
        if not present or not present[0]:
            return None
        wq = conn.execute("SELECT count(*) FROM dev_r_worker_queue").fetchone()
        qm = conn.execute("SELECT count(*) FROM queue_messages").fetchone()
        meta = (
            conn.execute("SELECT value FROM qb_bench_meta WHERE key = 'rows'").fetchone()
            if present[1]
            else None
        )
    built = int(meta[0]) if meta and str(meta[0]).isdigit() else None
    return Held(int(wq[0]) if wq else 0, int(qm[0]) if qm else 0, built)


def ensure_estate(url: str, name: str, rows: int, smoke: bool) -> bool:
    """Reuse the database ``name`` when it holds ``bench.triage``'s build of ``rows`` rows
    per estate; build it with ``bench.triage`` when it does not exist. True when this run
    built it (only then may the run drop it). A database of that name holding something
    else is left alone."""
    found = held(url, name)

    def fits(found: Held | None) -> bool:
        return found is not None and found.built_for == rows

    if fits(found):
        assert found is not None
        print(
            f"reusing {name}: {found.workers:,} rows in dev_r_worker_queue, "
            f"{found.clips:,} in queue_messages"
        )
        return False
    if exists(url, name):
        holds = (
            "no estate tables" if found is None else f"{found.workers:,} and {found.clips:,} rows"
        )
        raise RuntimeError(
            f"{name} exists but holds {holds}, not bench.triage's {rows:,} rows per estate; "
            f"this script does not replace a database it did not create. Rebuild it with "
            f"`python -m bench.triage --keep --runs 1 --rows {rows}` or drop it, then run again"
        )
    print(f"{name} is missing; building it with bench.triage (about a minute)", flush=True)
    started = time.monotonic()
    triage = [sys.executable, "-m", "bench.triage", "--url", url, "--rows", str(rows)]
    triage += ["--runs", "1", "--keep", "--database", name, *(["--smoke"] if smoke else [])]
    try:
        done = subprocess.run(
            triage,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if not fits(held(url, name)):
            print(done.stdout)
            raise RuntimeError(f"bench.triage did not build {name} (exit {done.returncode})")
    except BaseException:
        if exists(url, name):  # ours, half built
            drop_estate(url, name)
        raise
    print(f"built {name} in {time.monotonic() - started:.0f}s")
    return True


def drop_estate(url: str, name: str) -> None:
    drop(url, name)
    print(f"dropped {name}")


def pg_sessions(url: str, name: str) -> int | None:
    """Sessions ever opened to the database ``name`` (pg_stat_database, PostgreSQL 14+)."""
    try:
        with psycopg.connect(conninfo(url), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = %s", (name,)
            ).fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row and row[0] is not None else None


def existing_ids(url: str, name: str) -> list[tuple[str, str]]:
    """(queue, id) pairs for ``show``: failed worker rows, dead-lettered and live clip jobs."""
    with psycopg.connect(conninfo(url, name), connect_timeout=5) as conn:
        workers = conn.execute(
            "SELECT id FROM dev_r_worker_queue WHERE status IN ('failed', 'running') "
            "ORDER BY id DESC LIMIT 6"
        ).fetchall()
        clips = conn.execute(
            "SELECT job_id FROM queue_messages WHERE status IN ('DLQ', 'PROCESSING') "
            "ORDER BY available_at DESC LIMIT 6"
        ).fetchall()
    if not workers or not clips:
        raise RuntimeError(f"{name} has no failed worker rows or dead-lettered clip jobs")
    return [("workers", str(r[0])) for r in workers] + [("clips", str(r[0])) for r in clips]


COMMANDS = {  # kind -> the text after /queue ("show" takes an existing id)
    "triage-workers": "triage --queue workers",
    "triage-clips": "triage --queue clips",
    "dlq": "dlq --limit 10",
    "stuck-workers": "stuck --queue workers",
    "show": "show {id} --queue {queue}",
    "help": "help",  # not in the default mix: no database read, for diagnosis
}
DEFAULT_MIX = ("triage-workers", "triage-clips", "dlq", "stuck-workers", "show")


def command_mix(
    n: int, ids: list[tuple[str, str]], seed: int, kinds: Sequence[str] = DEFAULT_MIX
) -> list[tuple[str, str]]:
    """n (kind, text) pairs, the kinds in equal shares, in a fixed shuffled order."""
    shows = itertools.cycle(ids)
    out: list[tuple[str, str]] = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "show":
            queue, job = next(shows)
            out.append((kind, COMMANDS[kind].format(id=job, queue=queue)))
        else:
            out.append((kind, COMMANDS[kind]))
    random.Random(seed).shuffle(out)
    return out


# -- the processes ---------------------------------------------------------------------------


FLOOR_APP = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

async def events(request):
    await request.body()
    return Response(b"", status_code=200)

async def healthz(request):
    return Response(b"ok")

app = Starlette(routes=[Route("/slack/events", events, methods=["POST"]),
                        Route("/healthz", healthz)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), lifespan="off",
            log_level="warning", access_log=False)
"""


# -- sending ---------------------------------------------------------------------------------


@dataclass
class Sent:
    name: str
    kind: str
    text: str
    sent: float
    acked: float | None = None
    status: int | None = None
    error: str | None = None
    in_flight_at_send: int = 0  # earlier commands acked but not yet answered

    @property
    def ack(self) -> float | None:
        return None if self.acked is None else self.acked - self.sent


async def raw_post(base: str, path: str, body: str, headers: dict[str, str]) -> int:
    """POST over a fresh connection with asyncio streams; the status code. A leaner client
    than httpx (about 1 ms less per request on this kind of host), for --client raw."""
    url = httpx.URL(base)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {url.host}\r\nConnection: close\r\n"
        f"Content-Length: {len(body.encode())}\r\n{head}\r\n{body}"
    ).encode()
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection(url.host, url.port)
        try:
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()  # HTTP/1.1 200 OK
        finally:
            writer.close()
    return int(status_line.split()[1])


@dataclass
class Bench:
    fake: FakeSlack
    server: Serve
    client: httpx.AsyncClient
    raw: bool = False  # send with raw_post instead of httpx
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    counter: itertools.count[int] = field(default_factory=itertools.count)

    async def slash(self, kind: str, text: str, *, prefix: str, user: str) -> Sent:
        name = f"{prefix}-{self.run_id}-{next(self.counter)}"
        body = slash_body(self.fake, text, name=name, user=user)
        headers = signed(body)
        record = Sent(name, kind, text, time.monotonic())
        try:
            if self.raw:
                record.status = await raw_post(self.server.url, "/slack/events", body, headers)
            else:
                response = await self.client.post(
                    f"{self.server.url}/slack/events", content=body, headers=headers
                )
                record.status = response.status_code
            record.acked = time.monotonic()
        except (httpx.HTTPError, OSError, ValueError, IndexError, TimeoutError) as exc:
            record.acked = time.monotonic()
            record.error = type(exc).__name__
        return record

    def answers(self, prefix: str) -> dict[str, list[Call]]:
        found: dict[str, list[Call]] = defaultdict(list)
        for call in self.fake.recorded(f"/response/{prefix}-{self.run_id}-"):
            found[call.path.removeprefix("/response/")].append(call)
        return found

    async def wait_answers(self, prefix: str, names: set[str], within: float) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if names <= self.answers(prefix).keys():
                return
            await asyncio.sleep(0.05)


def title(call: Call) -> str:
    blocks = call.body.get("blocks") or []
    if blocks and blocks[0].get("type") == "header":
        return str(blocks[0]["text"]["text"])
    return str(call.body.get("text", ""))[:60]


async def probe_loop(
    bench: Bench, stop: asyncio.Event, out: dict[str, list[tuple[float, float]]]
) -> None:
    """Every PROBE_EVERY s: GET /healthz and a signed `/queue help`; (sent_at, latency)."""
    users = itertools.cycle(USERS)
    while not stop.is_set():
        started = time.monotonic()
        out["runnable"].append((started, runnable()))
        try:
            await bench.client.get(f"{bench.server.url}/healthz")
            out["healthz"].append((started, time.monotonic() - started))
        except httpx.HTTPError:
            out["healthz"].append((started, float("inf")))
        help_ = await bench.slash("help", "help", prefix="probe", user=next(users))
        if help_.ack is not None and help_.status == 200:
            out["help"].append((help_.sent, help_.ack))
        else:
            out["help"].append((help_.sent, float("inf")))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PROBE_EVERY)


# -- the run ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace, db_url: str, ids: list[tuple[str, str]]) -> int:
    task = asyncio.current_task()
    if task is not None:  # SIGTERM cancels like Ctrl-C does, so the cleanup below runs
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    fake = FakeSlack()  # bound, not yet serving: no thread runs while serve is forked
    workdir = Path(tempfile.mkdtemp(prefix="qb_slack_ack_"))
    server: Serve | None = None
    floor: Serve | None = None
    keep_log = fake_started = False
    quiet = 0.0 if args.smoke else 20.0  # seconds to wait for a quiet machine, at most
    try:
        # guarded: started before any thread (the fake's) runs
        server = start_serve(
            workdir, db_url, env=slack_env(fake), log_level=args.log_level, guard=True
        )
        if not args.no_floor:
            floor = start_app(workdir, FLOOR_APP, guard=True)
        fake.start()
        fake_started = True
        limits = httpx.Limits(
            # a new connection per request, as from Slack; no race with uvicorn's keep-alive
            # timeout closing an idle connection as it is reused
            max_connections=args.concurrency + 8,
            max_keepalive_connections=0,
        )
        async with httpx.AsyncClient(limits=limits, timeout=10.0) as client:
            t0 = time.monotonic()
            await asyncio.to_thread(wait_healthy, server)
            print(f"queuebot serve up in {time.monotonic() - t0:.1f}s (pid {server.proc.pid})")
            if floor is not None:
                await asyncio.to_thread(wait_healthy, floor)
                # serve's start (migrations, first samples) is not the floor
                await asyncio.to_thread(settle, within=quiet)
                await harness_floor(args, Bench(fake, floor, client, raw=args.client == "raw"))
                floor.stop()
            bench = Bench(fake, server, client, raw=args.client == "raw")
            await asyncio.to_thread(settle, within=quiet)  # the same quiet machine as the floor had
            code = await measure(args, bench, ids)
            keep_log = code == 2
            return code
    except BaseException:
        keep_log = True
        raise
    finally:
        if floor is not None:
            floor.stop()
        if server is not None:
            keep_log = server.close() or keep_log
        if fake_started:
            fake.stop()
        if keep_log or args.keep_log:
            print(f"serve log kept in {workdir / 'serve.log'}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


async def harness_floor(args: argparse.Namespace, bench: Bench) -> None:
    """The same signed bodies, count and window against the bare app (no Bolt, no
    queuebot): three runs, the one with the median p99 reported."""
    gate = asyncio.Semaphore(args.concurrency)
    mix = command_mix(args.requests, [("workers", "1")], seed=args.seed, kinds=args.mix)
    acks: list[float] = []

    async def one(kind: str, text: str) -> None:
        async with gate:
            record = await bench.slash(kind, text, prefix="floor", user=USERS[0])
            if record.ack is not None and record.status == 200:
                acks.append(record.ack)

    runs: list[list[float]] = []
    for _ in range(3):
        acks.clear()
        await asyncio.gather(*(one(k, t) for k, t in mix))
        runs.append(sorted(acks))
    runs.sort(key=lambda run: percentile(run, 0.99) if run else float("inf"))
    acks[:] = runs[1]  # the median run: a stray pause elsewhere on the machine shows in one
    print(
        f"harness floor (of 3 runs of this client against a bare uvicorn + Starlette app that "
        f"answers 200, the one with the median p99; "
        f"{args.requests} requests, {args.concurrency} in flight):\n"
        f"        {spread(acks, P50_P95_P99_MAX)}"
    )


async def measure(args: argparse.Namespace, bench: Bench, ids: list[tuple[str, str]]) -> int:
    users = itertools.cycle(USERS)
    # Warm-up: the pool's connections, reflection of the estate tables, auth.test, the
    # HTTP keep-alive connections; one of each command, a few at a time, answered.
    warm = command_mix(10, ids, seed=args.seed + 1)
    t0 = time.monotonic()
    sent = await asyncio.gather(
        *(bench.slash(k, t, prefix="warm", user=next(users)) for k, t in warm[:5])
    )
    sent += await asyncio.gather(
        *(bench.slash(k, t, prefix="warm", user=next(users)) for k, t in warm[5:])
    )
    await bench.wait_answers("warm", {s.name for s in sent}, within=120)
    warm_answers = bench.answers("warm")
    if len(warm_answers) != len(sent) or any(s.status != 200 for s in sent):
        print(f"warm-up failed: {[(s.text, s.status, s.error) for s in sent]}")
        return 2
    print(f"warm-up: {len(sent)} commands answered in {time.monotonic() - t0:.1f}s")

    # Idle baseline of the probes.
    probes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    stop = asyncio.Event()
    probing = asyncio.create_task(probe_loop(bench, stop, probes))
    try:
        await asyncio.sleep(args.idle_probe)
        burst_start = time.monotonic()

        mix = command_mix(args.requests, ids, seed=args.seed, kinds=args.mix)
        print(
            f"sending {args.requests} commands, at most {args.concurrency} in flight: "
            + ", ".join(f"{n} {k}" for k, n in sorted(Counter(k for k, _ in mix).items()))
        )
        load_before = loadavg()
        sessions_before = pg_sessions(args.url, args.database)
        serve_before, us_before = Sched.of(bench.server.proc.pid), Sched.of(os.getpid())
        busy_before = machine_busy()
        gate = asyncio.Semaphore(args.concurrency)
        records: list[Sent] = []
        acked: set[str] = set()

        async def one(kind: str, text: str) -> None:
            async with gate:
                answered = bench.answers("run").keys()
                in_flight = len(acked - answered)
                record = await bench.slash(kind, text, prefix="run", user=next(users))
                record.in_flight_at_send = in_flight
                records.append(record)
                if record.status == 200:
                    acked.add(record.name)

        await asyncio.gather(*(one(k, t) for k, t in mix))
        sends_done = time.monotonic()
        await bench.wait_answers("run", acked, within=args.wait)
        answers_done = time.monotonic()
        serve_sched = Sched.of(bench.server.proc.pid) - serve_before
        us_sched = Sched.of(os.getpid()) - us_before
        busy_after = machine_busy()
        await asyncio.sleep(1.2)  # backends report their statistics at most once a second
        sessions_after = pg_sessions(args.url, args.database)
        stop.set()
        await probing
    finally:
        if not probing.done():  # interrupted: stop probing before the client closes
            probing.cancel()
    load_after = loadavg()

    # -- figures ---------------------------------------------------------------------------
    answers = bench.answers("run")
    acks = [r.ack for r in records if r.ack is not None and r.status == 200]
    non_200 = [r for r in records if r.status != 200]
    delivered = [r for r in records if r.name in answers]
    lost = [r for r in records if r.name not in answers]
    doubled = [n for n, calls in answers.items() if len(calls) > 1]
    answer_lat = [answers[r.name][0].at - r.sent for r in delivered]
    error_answers = [
        (r, title(answers[r.name][0]))
        for r in delivered
        if title(answers[r.name][0]) in ERROR_TITLES
    ]
    last_answer = max((answers[r.name][0].at for r in delivered), default=burst_start)

    print()
    gave_up = not acked <= answers.keys()
    print(
        f"sent {len(records)} in {sends_done - burst_start:.2f}s; the last answer reached the "
        f"fake {last_answer - burst_start:.2f}s after the first send"
        + (f" (gave up waiting {args.wait:.0f}s after the last ack)" if gave_up else "")
    )
    print(f"ack     (send -> HTTP 200)     {spread(acks, P50_P95_P99_MAX)}")
    slow = sum(1 for a in acks if a > SLACK_ACK_DEADLINE)
    print(
        f"        non-200 acks: {len(non_200)}"
        + (f" {Counter(r.status or r.error for r in non_200)}" if non_200 else "")
        + f"; acks over Slack's {SLACK_ACK_DEADLINE:.0f} s deadline: {slow}"
    )
    print(f"answer  (send -> fake got it)  {spread(answer_lat, P50_P99_MAX)}")
    print(
        f"        delivered {len(delivered)}/{len(records)}, lost {len(lost)}, "
        f"answered twice {len(doubled)}, error answers {len(error_answers)}"
        + (f" {Counter(t for _, t in error_answers)}" if error_answers else "")
    )
    by_kind: dict[str, list[float]] = defaultdict(list)
    ack_by_kind: dict[str, list[float]] = defaultdict(list)
    for r in delivered:
        by_kind[r.kind].append(answers[r.name][0].at - r.sent)
    for r in records:
        if r.ack is not None and r.status == 200:
            ack_by_kind[r.kind].append(r.ack)
    for kind in sorted(by_kind):
        print(
            f"        {kind:<15} answer p50 {ms(percentile(by_kind[kind], 0.5)).strip():>10}"
            f"  max {ms(max(by_kind[kind])).strip():>10}"
            f"   ack p50 {ms(percentile(ack_by_kind[kind], 0.5)).strip():>9}"
            f"  max {ms(max(ack_by_kind[kind])).strip():>9}"
        )
    # Ack latency against how much answering work was under way when it was sent.
    quiet = [r.ack for r in records if r.ack is not None and r.in_flight_at_send == 0]
    busy = [r.ack for r in records if r.ack is not None and r.in_flight_at_send >= 20]
    print(f"ack, sent with 0 answers pending  (n={len(quiet):3}): {spread(quiet, P50_P99_MAX)}")
    print(f"ack, sent with >=20 pending       (n={len(busy):3}): {spread(busy, P50_P99_MAX)}")
    for probe in ("healthz", "help"):
        idle = [lat for at, lat in probes[probe] if at < burst_start]
        during = [lat for at, lat in probes[probe] if burst_start <= at < last_answer]
        print(
            f"probe {probe:<8} idle   (n={len(idle):3}): {spread(idle, P50_P99_MAX)}\n"
            f"      {'':<8} during (n={len(during):3}): {spread(during, P50_P99_MAX)}"
        )
    wall = answers_done - burst_start
    busy_s = busy_after[0] - busy_before[0]
    cpus = os.cpu_count() or 1
    running = [n for at, n in probes["runnable"] if burst_start <= at < last_answer]
    print(
        f"CPU over the {wall:.2f}s of the run, {cpus} CPUs: machine busy {busy_s:.2f}s "
        f"({busy_s / (wall * cpus):.0%})\n"
        f"  queuebot serve's event loop thread {serve_sched.cpu:.2f}s on a CPU, "
        f"{serve_sched.waiting:.2f}s runnable but waiting for one "
        f"(all its threads {serve_sched.all_cpu:.2f}s / {serve_sched.all_waiting:.2f}s)\n"
        f"  this bench's loop thread {us_sched.cpu:.2f}s / {us_sched.waiting:.2f}s "
        f"(all threads, with the fake's: {us_sched.all_cpu:.2f}s / {us_sched.all_waiting:.2f}s)\n"
        f"  the rest (PostgreSQL, other work) "
        f"{busy_s - serve_sched.all_cpu - us_sched.all_cpu:.2f}s on a CPU"
    )
    print(
        f"runnable tasks during the run: mean "
        f"{sum(running) / max(len(running), 1):.1f}, max {max(running, default=0)} "
        f"(n={len(running)}); load average {load_before} before, {load_after} after"
    )
    if sessions_before is not None and sessions_after is not None:
        print(
            f"PostgreSQL sessions opened to {args.database} during the run: "
            f"{sessions_after - sessions_before} (the bot's pool opening connections)"
        )

    p99 = percentile(acks, 0.99) * 1000 if acks else float("inf")
    checks = [
        (f"ack p99 {p99:.1f} ms < {TARGET_ACK_P99_MS:.0f} ms", p99 < TARGET_ACK_P99_MS),
        (f"non-200 acks {len(non_200)} == 0", not non_200),
        (
            f"answers delivered {len(delivered)}/{len(records)}, none lost or doubled",
            not lost and not doubled and len(records) == args.requests,
        ),
        (f"error answers {len(error_answers)} == 0", not error_answers),
    ]
    what = f"p99 ack < {TARGET_ACK_P99_MS:.0f} ms, every answer delivered, none lost, zero non-200"
    return judge(checks, args.smoke, what)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--requests", full=REQUESTS, smoke=10, help="slash commands to send")
    parser.size("--concurrency", full=CONCURRENCY, smoke=5, help="commands in flight at most")
    parser.size(
        "--wait",
        full=WAIT,
        smoke=30.0,
        type=float,
        help="seconds to wait for answers after the last ack",
    )
    parser.size(
        "--rows",
        full=ROWS,
        smoke=5_000,
        help="rows per estate expected in the database (and built when it is missing)",
    )
    parser.add_argument(
        "--database",
        metavar="NAME",
        help="the estate's database (default qb_bench_triage, as bench.triage keeps it for "
        "--rows; --smoke: one of this run's own)",
    )
    parser.add_argument(
        "--mix",
        type=names,
        default=list(DEFAULT_MIX),
        help=f"comma-separated kinds in equal shares (default {','.join(DEFAULT_MIX)}; also: help)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the command order")
    parser.size(
        "--idle-probe",
        full=1.0,
        smoke=0.3,
        type=float,
        help="seconds of idle probes before the burst",
    )
    parser.serve_options()
    parser.add_argument(
        "--client",
        choices=["httpx", "raw"],
        default="raw",
        help="send the slash commands over bare asyncio streams (default) or with "
        "httpx.AsyncClient, whose own CPU cost on this host shows up in every ack",
    )

    parser.add_argument(
        "--no-floor", action="store_true", help="skip the harness-floor calibration"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the database if this run had to build it"
    )
    args = parser.read(argv)
    if args.database is None:
        kept = database_name(keep=True, reuse=True, rows=args.rows)
        args.database = unique_name("qb_bench_slack_ack") if args.smoke else kept
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    unknown = [k for k in args.mix if k not in COMMANDS]
    if unknown or not args.mix:
        print(f"--mix: unknown kinds {unknown}; choose from {', '.join(COMMANDS)}")
        return 2
    built = False
    try:
        built = ensure_estate(args.url, args.database, args.rows, args.smoke)
        ids = existing_ids(args.url, args.database)
        return asyncio.run(run(args, engine_url(args.url, args.database), ids))
    finally:
        if built and not args.keep:
            drop_estate(args.url, args.database)
        elif built:
            print(f"kept {args.database}")


if __name__ == "__main__":
    exit_with(main)
