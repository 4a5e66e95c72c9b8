"""10,000 incident timers coming due within a minute: how late the durable scheduler
fires them, and what each costs the database.

Builds a scratch PostgreSQL database of its own (``qb_bench_scheduler_<pid>_<random>``,
dropped at the end) and declares ``--incidents`` incidents through ``Incidents.declare``
on a drill runbook of ``--communications`` audiences (windows of ``--shortest`` 10 s to
``--longest`` 30 s), with one
reminder at half of each window (``[incidents] remind_at = [0.5]``): 1,000 incidents x
5 communications x (reminder + deadline) = 10,000 timers. The declarations are spread
over ``--spread`` seconds of the incidents' clock, a day ahead, so nothing comes due
while they are written. Then the replicas start, and every incident's clock
(declaration, due times, its timers, its timeline) is moved back together so the first
timer comes due 3 s later and the last about a minute after that. Nobody is told, so
every reminder and every deadline fires (an escalation: the "missed" timeline entry, the
audit event and two posts, left in the outbox).

The real scheduler (``Scheduler.run_forever``; ``--replicas`` of them, each with an engine
of its own, on this event loop or with ``--processes`` each in a process of its own) runs
on the real clock until every timer has fired. Per timer: the lag = when its handler's
transaction committed - its due time (the lag to when the handler started is printed
too). It prints p50, p99 and max of the lag, overall, per kind and per 5 s of due time;
checks that every timer fired exactly once (one committed handler run per timer, a
timeline entry per reminder and per deadline, an audit event and two posts per
deadline); and counts database statements (a SQLAlchemy ``before_cursor_execute``
listener on each engine) per timer fired and per scheduler pass, with the statements
that took the most time.

Targets: lag p99 < 1 s; every timer fired exactly once.

    .venv/bin/python -m bench.scheduler [--url ADMIN_URL] [--incidents 1000]
                                        [--replicas 1] [--processes]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bench.kit.changes import wire as wire_bench
from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import loadavg, p50_p99_max, percentile, verdict
from bench.kit.scratch import create, drop
from bot.bootstrap import Services
from services.audit import Actor
from services.config import default_queues
from services.config.incidents import IncidentsConfig
from services.db import create_engine
from services.db.migrate import upgrade
from services.incidents.timers import DEADLINE, REMIND
from services.runbooks import Runbook, RunbookLibrary, parse_runbook, shipped_runbooks
from services.scheduler import BatchHandler, Due, Scheduler

DB = "qb_bench_scheduler"
ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "gd:timer-drill"
AUDIENCES = ("operators", "actors", "support", "owners", "customers", "partners", "finance")
TARGET_P99 = 1.0  # seconds
LEAD = 3.0  # seconds from the start of the firing to the first timer (at the earliest)
LEAD_ACTOR = Actor("dora", "bench", "dora")


class BenchClock:
    """The incidents' clock: fixed while they are declared, then the real one."""

    def __init__(self) -> None:
        self.fixed: datetime | None = None

    def __call__(self) -> datetime:
        return self.fixed or datetime.now(UTC)


@dataclass(frozen=True)
class Drill:
    """The drill's audiences: how many, and their windows, spread from the shortest to the
    longest (seconds)."""

    communications: int = 5
    shortest: float = 10.0
    longest: float = 30.0


def drill_runbook(drill: Drill) -> Runbook:
    """The shipped queue-loss runbook with the drill's audiences and windows."""
    (source,) = [r for r in shipped_runbooks() if r.scenario_id == "gd:queue-loss"]
    text = (ROOT / "services" / "runbooks" / source.source).read_text()
    text = text.replace('"gd:queue-loss"', f'"{SCENARIO}"').replace(
        '"runbook:queue-loss"', '"runbook:timer-drill"'
    )
    block = re.search(r'"communications": \[.*?\n  \],\n', text, re.S)
    assert block is not None
    first, span = round(drill.shortest * 1000), round((drill.longest - drill.shortest) * 1000)
    n = drill.communications
    windows = [first + k * span // max(1, n - 1) for k in range(n)]
    items = ",\n".join(
        f'    {{"audience": "{audience}", "channelDependencyId": "dep:notification-channel", '
        f'"withinMs": {window}}}'
        for audience, window in zip(AUDIENCES, windows, strict=False)
    )
    text = text.replace(block.group(0), f'"communications": [\n{items}\n  ],\n')
    return parse_runbook(text, source="bench/timer-drill.md")


@dataclass
class Fired:
    kind: str
    subject: str
    replica: int
    started: float  # time.time() when the handler started
    committed: float = 0.0  # time.time() when its transaction had committed


@dataclass
class Statements:
    """What one engine sent: statements by text, with the time each took."""

    count: int = 0
    seconds: float = 0.0
    by_text: Counter[str] = field(default_factory=Counter)
    time_by_text: dict[str, float] = field(default_factory=dict)
    commits: int = 0
    rollbacks: int = 0
    checkouts: int = 0

    def listen(self, engine: AsyncEngine) -> None:
        sync = engine.sync_engine

        @event.listens_for(sync, "before_cursor_execute")
        def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            conn.info["bench_t0"] = time.perf_counter()
            self.count += 1
            self.by_text[_shape(statement)] += 1

        @event.listens_for(sync, "after_cursor_execute")
        def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            took = time.perf_counter() - conn.info.pop("bench_t0", time.perf_counter())
            self.seconds += took
            shape = _shape(statement)
            self.time_by_text[shape] = self.time_by_text.get(shape, 0.0) + took

        @event.listens_for(sync, "commit")
        def commit(conn: Any) -> None:
            self.commits += 1

        @event.listens_for(sync, "rollback")
        def rollback(conn: Any) -> None:
            self.rollbacks += 1

        @event.listens_for(sync.pool, "checkout")
        def checkout(*args: Any) -> None:
            self.checkouts += 1

    def add(self, other: Statements) -> None:
        self.count += other.count
        self.seconds += other.seconds
        self.by_text.update(other.by_text)
        for text, seconds in other.time_by_text.items():
            self.time_by_text[text] = self.time_by_text.get(text, 0.0) + seconds
        self.commits += other.commits
        self.rollbacks += other.rollbacks
        self.checkouts += other.checkouts


@functools.lru_cache(maxsize=512)  # the same few statements again and again: shaped once
def _shape(statement: str) -> str:
    """A statement without its parameters' values, short enough to print on one line."""
    flat = " ".join(statement.split())
    flat = re.sub(r"\(%\(.*?\)s(, %\(.*?\)s)*\)", "(...)", flat)
    flat = re.sub(r"%\([a-z_0-9]+\)s", "?", flat)
    flat = re.sub(r"SELECT .*? FROM", "SELECT ... FROM", flat, count=1)
    return flat[:110]


def load() -> str:
    return f"load average {loadavg()} ({os.cpu_count()} CPUs)"


def wire(engine: AsyncEngine, clock: BenchClock, library: RunbookLibrary) -> Services:
    # no notifier: the posts stay in the outbox; what is measured is the firing
    return wire_bench(
        engine,
        default_queues(),
        clock=clock,
        runbooks=library,
        incidents=IncidentsConfig(remind_at=[0.5]),
        channels=("operators", "actors"),  # as if [channels] gave each an id
    )


async def declare_all(url: str, incidents: int, spread: float, library: RunbookLibrary) -> float:
    """Declare the incidents on a clock of their own, a day ahead so that nothing comes
    due before the firing starts (``shift``); return how long it took."""
    engine = create_engine(url)
    clock = BenchClock()
    desk = wire(engine, clock, library).incidents
    base = datetime.now(UTC) + timedelta(days=1)
    started = time.perf_counter()
    for i in range(incidents):
        clock.fixed = base + timedelta(seconds=spread * i / incidents)
        await desk.declare(
            scenario=SCENARIO,
            summary=f"timer drill {i}",
            actor=LEAD_ACTOR,
            queue=f"q{i:05d}",
            origin={"platform": "bench", "channel": "bench"},
        )
    took = time.perf_counter() - started
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM ANALYZE"))
    await engine.dispose()
    return took


async def shift(url: str) -> None:
    """Move every incident's clock (declaration, due times, timers, timeline) forward or
    back together, so that the first timer comes due ``LEAD`` seconds from now."""
    engine = create_engine(url)
    async with engine.begin() as conn:
        first = (await conn.execute(sa.text("SELECT min(due_at) FROM qb_schedule"))).scalar_one()
        by = datetime.now(UTC) + timedelta(seconds=LEAD) - first
        for table, columns in (
            ("qb_schedule", ("due_at", "created_at")),
            ("qb_incident_obligations", ("due_at",)),
            ("qb_incidents", ("declared_at",)),
            ("qb_incident_timeline", ("at",)),
        ):
            moved = ", ".join(f"{c} = {c} + :by" for c in columns)
            await conn.execute(sa.text(f"UPDATE {table} SET {moved}"), {"by": by})
    await engine.dispose()


@dataclass
class Result:
    """What one replica did."""

    number: int
    fired: list[Fired] = field(default_factory=list)  # committed handler runs
    attempts: int = 0  # handler runs started (the ones rolled back and run again too)
    statements: Statements = field(default_factory=Statements)
    passes: int = 0
    items: int = 0
    cpu: float = 0.0  # CPU seconds of the replica's process while it ran


def instrument(sched: Scheduler, result: Result) -> None:
    """Record when each timer's handler starts and when its transaction has committed
    (a follow-up: those run after the commit), and count passes and the items they ran."""

    def timed(handler: BatchHandler) -> BatchHandler:
        async def run(conn: AsyncConnection, items: Sequence[Due], now: datetime) -> Any:
            started = time.time()
            result.attempts += len(items)
            fired = [Fired(item.kind, item.subject, result.number, started) for item in items]
            follow_ups = await handler(conn, items, now)

            async def committed() -> None:
                at = time.time()
                for f in fired:
                    f.committed = at
                result.fired.extend(fired)

            return [committed, *follow_ups]

        return run

    sched.register_batch((REMIND, DEADLINE), timed(sched.batches[REMIND]))
    run_due = sched.run_due

    async def counted(limit: int = 1000) -> int:
        result.passes += 1
        ran = await run_due(limit)
        result.items += ran
        return ran

    sched.run_due = counted  # type: ignore[method-assign]


async def replica(
    url: str,
    number: int,
    drill: Drill,
    started: Callable[[], None],
    stopped: Callable[[], Awaitable[object]],
) -> Result:
    """One replica: an engine of its own and the real scheduler, until ``stopped``."""
    library = RunbookLibrary([drill_runbook(drill)])
    engine = create_engine(url)
    result = Result(number)
    sched = wire(engine, BenchClock(), library).scheduler
    instrument(sched, result)
    result.statements.listen(engine)
    stop = asyncio.Event()
    task = asyncio.create_task(sched.run_forever(stop))
    cpu = time.process_time()
    started()
    try:
        await stopped()
    finally:
        stop.set()
        await task
        result.cpu = time.process_time() - cpu
        await engine.dispose()
    return result


def replica_process(url: str, number: int, drill: Drill, ready: Any, stop: Any, out: Any) -> None:
    """A replica in a process of its own (``--processes``)."""

    async def stopped() -> None:
        await asyncio.to_thread(stop.wait)

    out.put(asyncio.run(replica(url, number, drill, ready.set, stopped)))


async def fire(
    url: str, replicas: int, drill: Drill, processes: bool
) -> tuple[list[Result], dict[tuple[str, str], datetime], float]:
    """Start the replicas, bring the timers to now, and wait until all have fired."""
    results: list[Result] = []
    if processes:
        context = multiprocessing.get_context("spawn")
        ready = [context.Event() for _ in range(replicas)]
        stop, out = context.Event(), context.Queue()
        children = [
            context.Process(target=replica_process, args=(url, n, drill, ready[n], stop, out))
            for n in range(replicas)
        ]
        for child in children:
            child.start()
        for event_ in ready:  # each has its scheduler running
            await asyncio.to_thread(event_.wait, 120)
    else:
        done = asyncio.Event()
        running = [
            asyncio.create_task(replica(url, n, drill, lambda: None, done.wait))
            for n in range(replicas)
        ]
    await shift(url)
    due = await due_times(url)
    probe = create_engine(url)
    started = time.perf_counter()
    try:
        while True:
            await asyncio.sleep(0.5)
            async with probe.connect() as conn:
                left = (
                    await conn.execute(
                        sa.text("SELECT count(*) FROM qb_schedule WHERE kind LIKE 'incident.%'")
                    )
                ).scalar_one()
            if left == 0:
                break
            if time.perf_counter() - started > 900:
                print(f"gave up after 900 s with {left:,} timers left")
                break
        took = time.perf_counter() - started
        await asyncio.sleep(1.0)  # anything fired twice would show up by now
    finally:
        await probe.dispose()
        if processes:
            stop.set()
            results = [await asyncio.to_thread(out.get, timeout=300) for _ in children]
            for child in children:
                child.join()
        else:
            done.set()
            results = list(await asyncio.gather(*running))
    return sorted(results, key=lambda r: r.number), due, took


async def tally(url: str) -> dict[str, int]:
    engine = create_engine(url)
    queries = {
        "timeline reminders": "SELECT count(*) FROM qb_incident_timeline WHERE kind = 'reminder'",
        "timeline missed": "SELECT count(*) FROM qb_incident_timeline WHERE kind = 'missed'",
        "audit deadline_missed": (
            "SELECT count(*) FROM qb_audit_events WHERE action = 'incident.deadline_missed'"
        ),
        "posts": "SELECT count(*) FROM qb_outbox WHERE kind = 'incident.post'",
        "obligations missed": (
            "SELECT count(*) FROM qb_incident_obligations WHERE state = 'missed'"
        ),
        "reminders counted": "SELECT coalesce(sum(reminders), 0) FROM qb_incident_obligations",
    }
    async with engine.connect() as conn:
        found = {k: int((await conn.execute(sa.text(q))).scalar_one()) for k, q in queries.items()}
    await engine.dispose()
    return found


async def due_times(url: str) -> dict[tuple[str, str], datetime]:
    engine = create_engine(url)
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT kind, subject, due_at FROM qb_schedule"))).all()
    await engine.dispose()
    return {(str(k), str(s)): d for k, s, d in rows}


async def run(
    url: str,
    incidents: int,
    drill: Drill,
    replicas: int,
    spread: float,
    processes: bool,
    smoke: bool,
) -> int:
    print(load())
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    runbook = drill_runbook(drill)
    took = await declare_all(url, incidents, spread, RunbookLibrary([runbook]))
    print(
        f"declared {incidents:,} incidents ({drill.communications} communications each, windows "
        f"{', '.join(c.window for c in runbook.communications)}; a reminder at half of each) "
        f"in {took:.1f} s ({incidents / took:,.0f}/s)"
    )
    how = f"{replicas} process(es)" if processes else f"{replicas} replica(s) in this process"
    print(f"firing with {how}; {load()}")
    results, due, wall = await fire(url, replicas, drill, processes)
    timers = len(due)
    deadlines = sum(1 for kind, _ in due if kind == DEADLINE)
    first, last = min(due.values()), max(due.values())
    span = (last - first).total_seconds()
    print(
        f"{timers:,} timers ({deadlines:,} deadlines) due over {span:.0f} s "
        f"({timers / span:,.0f}/s on average); all fired {wall:.1f} s after the firing "
        f"started; {load()}"
    )

    fired = [f for r in results for f in r.fired]
    runs = Counter((f.kind, f.subject) for f in fired)
    twice = [key for key, n in runs.items() if n > 1]
    never = [key for key in due if key not in runs]
    started_lag = [f.started - due[(f.kind, f.subject)].timestamp() for f in fired]
    lag = [f.committed - due[(f.kind, f.subject)].timestamp() for f in fired]
    print(f"lag (handler start - due):    {p50_p99_max(started_lag)}")
    print(f"lag (committed - due):        {p50_p99_max(lag)}  <- the target's")
    by_kind: defaultdict[str, list[float]] = defaultdict(list)
    for f, value in zip(fired, lag, strict=True):
        by_kind[f.kind].append(value)
    for kind, values in sorted(by_kind.items()):
        print(f"  {kind:18} {p50_p99_max(values)}")
    window = 5.0  # the lag over the run: where the late ones were
    buckets: defaultdict[int, list[float]] = defaultdict(list)
    for f, value in zip(fired, lag, strict=True):
        buckets[int((due[(f.kind, f.subject)] - first).total_seconds() // window)].append(value)
    print(f"  by due time ({window:.0f} s buckets): timers due (per s), lag p99 / max in ms")
    for bucket in sorted(buckets):
        values = buckets[bucket]
        print(
            f"    +{bucket * window:3.0f} s {len(values):6,} ({len(values) / window:4.0f}/s) "
            f"{1000 * percentile(values, 0.99):8.0f} / {1000 * max(values):8.0f}"
        )

    found = await tally(url)
    wanted = {
        "timeline reminders": timers - deadlines,
        "timeline missed": deadlines,
        "audit deadline_missed": deadlines,
        "posts": incidents + (timers - deadlines) + 2 * deadlines,
        "obligations missed": deadlines,
        "reminders counted": timers - deadlines,
    }
    once = not twice and not never and found == wanted
    print(
        f"committed handler runs {len(fired):,} for {timers:,} timers: {len(twice)} ran "
        f"twice, {len(never)} never; {sum(r.attempts for r in results) - len(fired):,} "
        "more started, were rolled back and ran again"
    )
    for key, want in wanted.items():
        said = "ok" if found[key] == want else "WRONG"
        print(f"  {key:22} {found[key]:7,} (expected {want:,}) {said}")

    total = Statements()
    for result in results:
        s = result.statements
        print(
            f"replica {result.number}: {result.items:,} timers in {result.passes:,} passes; "
            f"{s.count:,} statements ({s.count / max(1, result.items):.1f} per timer, "
            f"{s.count / max(1, result.passes):.1f} per pass), {s.commits:,} commits, "
            f"{s.rollbacks:,} rollbacks, {s.checkouts:,} connection checkouts (each a ping); "
            f"{s.seconds:.1f} s in statements"
        )
        total.add(s)
    items = sum(r.items for r in results)
    passes = sum(r.passes for r in results)
    print(
        f"all: {total.count:,} statements for {items:,} timers = "
        f"{total.count / max(1, items):.1f} per timer (+ BEGIN, COMMIT and a ping per "
        f"transaction); {passes:,} passes = {total.count / max(1, passes):.1f} statements "
        f"per pass; {total.seconds:.1f} s in statements"
    )
    # replicas on this event loop share one process: its CPU is counted once
    cpu = sum(r.cpu for r in results) if processes else max(r.cpu for r in results)
    print(
        f"CPU of the scheduler process(es): {cpu:.1f} s = {1000 * cpu / max(1, items):.1f} ms "
        f"per timer (the firing took {wall:.1f} s)"
    )
    print("  statements by time spent (count, total ms, mean ms):")
    for text, seconds in sorted(total.time_by_text.items(), key=lambda x: -x[1])[:12]:
        n = total.by_text[text]
        print(f"    {n:7,} {1000 * seconds:8.0f} {1000 * seconds / n:6.2f}  {text}")

    p99 = percentile(lag, 0.99) if lag else float("inf")
    ok = once and p99 < TARGET_P99
    print(
        f"targets: lag p99 {1000 * p99:.0f} ms < {1000 * TARGET_P99:.0f} ms: "
        f"{'met' if p99 < TARGET_P99 else 'MISSED'}; every timer fired exactly once: "
        f"{'yes' if once else 'NO'}"
    )
    return verdict(ok, smoke)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--incidents", full=1000, smoke=10, help="incidents declared")
    parser.size(
        "--communications", full=5, smoke=2, help=f"audiences per incident (<= {len(AUDIENCES)})"
    )
    parser.size("--shortest", full=10.0, smoke=1.0, type=float, help="the shortest window, s")
    parser.size("--longest", full=30.0, smoke=2.0, type=float, help="the longest window, s")
    parser.add_argument("--replicas", type=int, default=1, help="schedulers, each its own engine")
    parser.add_argument(
        "--processes", action="store_true", help="each replica in a process of its own"
    )
    parser.size(
        "--spread",
        full=30.0,
        smoke=1.0,
        type=float,
        help="seconds over which the incidents are declared",
    )
    args = parser.read(argv)
    if not 1 <= args.communications <= len(AUDIENCES):
        parser.error(f"--communications must be 1 to {len(AUDIENCES)}")
    if not 0 < args.shortest <= args.longest:
        parser.error("--shortest must be above 0 and at most --longest")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    drill = Drill(args.communications, args.shortest, args.longest)
    name, url = create(args.url, DB)  # this run's own: concurrent runs never collide
    try:
        return asyncio.run(
            run(
                url,
                args.incidents,
                drill,
                args.replicas,
                args.spread,
                args.processes,
                args.smoke,
            )
        )
    finally:
        drop(args.url, name)


if __name__ == "__main__":
    exit_with(main)
