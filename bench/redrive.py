"""Redrive N dead-lettered message_job jobs on PostgreSQL, queuebot against two floors
measured in the same run.

One scratch database, one estate of ``--jobs`` dead letters (default 10,000), reset to
its dead state before every measured thing. What is measured, alternating, ``--repeat``
times each (default 3; each run's figures, the medians and the load average are printed):

1. queuebot: one change request (freeze, the snapshot of every row kept as the request's
   items with its digest, audit) and one approval that runs the guarded set-based update,
   writes a REDRIVE_REQUESTED event per job, records each changed row as an outcome
   (with its before-image where it differs from the frozen one) and the audit event with
   their digest, in one transaction. Request and approval are both inside the timed part
   and are printed apart; the ids of every job are passed to the request.
2. the bare reset: the redrive procedure's step 4 done set-based in one transaction, as a
   DBA would type it by hand over all the dead letters. The statement selects the rows
   itself (``WHERE status = 'DLQ'``, no id list is sent) and chains the three changes
   with data-modifying CTEs: the messages to PENDING, their FAILED jobs to QUEUED, and a
   REDRIVE_REQUESTED event for each job just changed. Nothing comes back to the process.
3. the snapshot + reset: the procedure's steps 3 and 4 done set-based in one
   transaction, the least an audited redrive must do. Step 3 is one ``INSERT ... SELECT``
   into a snapshot table (no index) of each dead letter's message, its job and its job
   events as one JSON text, with the SHA-256 of that text; step 4 is the bare reset
   above. This is the floor the main target is read against: queuebot does the work of
   both steps (it snapshots every row before changing it).
4. memory: the process's RSS before each queuebot request (idle: the estate built, the
   services wired) and its peak during request + approval. The peak is VmHWM after
   writing "5" to /proc/self/clear_refs (which resets it to the current RSS); where that
   file is not writable, VmRSS is sampled every 5 ms from a thread instead (printed).
5. scaling: when ``--jobs`` exceeds ``--compare-jobs`` (default 10,000), request +
   approval over the first ``--compare-jobs`` jobs (by id) is timed too, in the same
   rounds, and the time ratio big / small is printed; so are both floors over those jobs
   (``job_id <=`` the last of them), the 10,000 figures judged against them too.
6. where queuebot's time goes: every statement of its measured runs (a cursor hook),
   grouped by its text, median per run, for the request and the approval apart, and what
   is left (Python, pool checkouts, commits). ``--explain`` then runs one more request
   and approval, and each floor, each after the same reset, under PostgreSQL's
   ``auto_explain`` (``ANALYZE, BUFFERS``; not timed) and prints each plan that took at
   least ``--explain-ms``, node by node: its time with its children (in all its
   loops), its rows, its loops and its buffers.
7. the manual redrive runbook's procedure, one job at a time through the same engine, over
   at most ``--manual-jobs`` jobs (default 10,000; ``--no-manual`` skips it): step 3
   (snapshot: SELECT * of the message, the job and its events) and step 4 (BEGIN; UPDATE
   queue_messages; UPDATE clip_jobs; INSERT job_events; COMMIT). Printed, not judged.

The estate's tables are reflected before the first round, as a running queuebot has them
after its first command. The reset returns every message to DLQ and every job to FAILED,
empties job_events and the snapshot table, rewrites both tables in id order (CLUSTER),
then VACUUM ANALYZE and CHECKPOINT, so every measured run starts from the same physical
state (``--smoke``, which measures nothing, leaves the CHECKPOINT out: it is the whole
server's). Autovacuum is off on the estate tables of the scratch database so that it
never starts in the middle of a run.

Targets (PASS/FAIL each; exit 0 only when every one measured passes), at any full size
and, with ``--jobs`` above ``--compare-jobs``, at that smaller size too:
queuebot's jobs/s >= 60% of the snapshot + reset's (its time <= 1/0.6 of theirs); the
approval alone <= 1.3x the bare reset's time; and with ``--jobs`` >= 100,000: peak RSS -
idle RSS <= 100 MB, and the time <= linear in jobs against the ``--compare-jobs`` run
(10x for 100,000 against 10,000).

    .venv/bin/python -m bench.redrive [--url ADMIN_URL] [--jobs 10000] [--repeat 3]
        [--compare-jobs 10000] [--manual-jobs 10000] [--no-manual] [--no-boards]
        [--explain] [--explain-ms 5]

queuebot is wired as serve wires it where the board is shown (Slack set up): every
change asks for the board's refresh in its transaction (an outbox item, on the audit
trail's appends); ``--no-boards`` wires it as where the board is shown nowhere, to
compare.

``--trace-memory`` measures nothing of the above: it runs one request and one approval
under ``tracemalloc`` and prints, at the start of each audit append (the moment a step
holds everything it built), the Python memory in use and the lines that allocated most
of it, and the peak of the whole run: where a large redrive's memory goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import threading
import time
import tracemalloc
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.kit.changes import FOR_REDRIVE, dead_letters, job_ids, redrive, wire
from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import judge, loadavg, status_mb
from bench.kit.scratch import conninfo, create, drop
from bench.kit.statements import Statement, StatementTimer
from services.audit import AuditTrail
from services.changes.requests import ChangeRequests
from services.db import create_engine

DB = "qb_bench_redrive"
BIG = 100_000  # the memory and scaling targets are judged from this many jobs
MEMORY_MB = 100.0
SHARE = 60.0  # queuebot's jobs/s as a share of the snapshot + reset's, at least (%)
APPROVAL = 1.3  # the approval's time against the bare reset's, at most
NOTE = "Operator returned DLQ message to PENDING after root-cause fix"
SNAPSHOTS = "bench_redrive_snapshot"  # the runbook's step 3, kept set-based: no index
SETUP = (
    *FOR_REDRIVE,
    f"CREATE TABLE {SNAPSHOTS} (message_id uuid NOT NULL, job_id uuid NOT NULL,"
    " image text NOT NULL, sha256 text NOT NULL)",
    f"ALTER TABLE {SNAPSHOTS} SET (autovacuum_enabled = false)",
)

RESET = f"""
UPDATE queue_messages SET status = 'DLQ', attempt_count = 3, claimed_at = now(),
       last_error = 'ffmpeg exited with code 137';
UPDATE clip_jobs SET status = 'FAILED', attempt_count = 3, progress_percent = 20,
       finished_at = now(), error_message = 'ffmpeg exited with code 137';
TRUNCATE job_events, {SNAPSHOTS};
"""
SETTLE = f"""
CLUSTER clip_jobs USING clip_jobs_pkey;
CLUSTER queue_messages USING bench_qm_job;
VACUUM (ANALYZE) queue_messages, clip_jobs, job_events, {SNAPSHOTS};
"""
# Step 4, set-based: the rows selected by the statement itself, nothing sent back.
BARE = """
WITH m AS (
  UPDATE queue_messages SET status = 'PENDING', attempt_count = 0, available_at = now(),
         claimed_at = NULL, last_error = NULL
  WHERE status = 'DLQ'{upto}
  RETURNING job_id
), j AS (
  UPDATE clip_jobs SET status = 'QUEUED', attempt_count = 0, progress_percent = 0,
         finished_at = NULL, error_message = NULL
  WHERE id IN (SELECT job_id FROM m) AND status = 'FAILED'
  RETURNING id
)
INSERT INTO job_events (id, aggregate_id, event_type, message, created_at)
SELECT gen_random_uuid(), id, 'REDRIVE_REQUESTED', :note, now() FROM j
"""
# Step 3, set-based: each dead letter's message, its job and its job events kept as one
# JSON text with the SHA-256 of that text, in the same transaction as step 4.
SNAPSHOT = f"""
INSERT INTO {SNAPSHOTS} (message_id, job_id, image, sha256)
SELECT m.id, j.id, x.image, encode(sha256(convert_to(x.image, 'UTF8')), 'hex')
FROM queue_messages AS m
JOIN clip_jobs AS j ON j.id = m.job_id
CROSS JOIN LATERAL (
  SELECT json_build_object(
    'message', to_json(m), 'job', to_json(j),
    'events', (SELECT coalesce(json_agg(e ORDER BY e.created_at), '[]'::json)
               FROM job_events AS e WHERE e.aggregate_id = j.id))::text AS image
  OFFSET 0  -- built once per row, not again for its digest
) AS x
WHERE m.status = 'DLQ' AND j.status = 'FAILED'{{upto}}
"""
UPTO = " AND {column} <= CAST(:upto AS uuid)"


def _statements(script: str) -> list[str]:
    return [s for s in script.split(";\n") if s.strip()]


def _clear_peak() -> bool:
    """Reset VmHWM to the current RSS; False where /proc/self/clear_refs is not writable."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakRss:
    """The process's RSS on entry (idle) and its peak until exit, in MB."""

    def __init__(self) -> None:
        self.idle_mb = 0.0
        self.peak_mb = 0.0
        self.method = ""
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRss:
        self.idle_mb = status_mb("VmRSS")
        if _clear_peak():
            self.method = "VmHWM after clear_refs"
        else:
            self.method = "VmRSS sampled every 5 ms (clear_refs not writable)"
            self._samples = [self.idle_mb]
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self._samples.append(status_mb("VmRSS"))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            self.peak_mb = status_mb("VmHWM")
            return
        self._stop.set()
        self._thread.join()
        self._samples.append(status_mb("VmRSS"))
        self.peak_mb = max(self._samples)

    @property
    def grew_mb(self) -> float:
        return self.peak_mb - self.idle_mb


@dataclass
class Run:
    """One measured redrive: its time (request and approval apart for queuebot, the
    snapshot apart for the snapshot + reset) and RSS."""

    jobs: int
    seconds: float
    rss: PeakRss
    request_s: float = 0.0
    approve_s: float = 0.0
    snapshot_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


@dataclass
class Size:
    """The runs at one size: queuebot and the two floors."""

    jobs: int
    queuebot: list[Run] = field(default_factory=list)
    bare: list[Run] = field(default_factory=list)
    snapshot: list[Run] = field(default_factory=list)


@dataclass
class Manual:
    jobs: int
    snapshot_s: float = 0.0
    update_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.snapshot_s + self.update_s


@dataclass
class Results:
    big: Size
    small: Size | None = None
    manual: Manual | None = None
    loads: list[str] = field(default_factory=list)  # the load average as each round began
    # request, approve, request, ...: each statement's text and time, not its parameters
    timer: StatementTimer = field(default_factory=lambda: StatementTimer(params=False))
    plans: list[Plan] = field(default_factory=list)  # --explain


async def reset(engine: AsyncEngine, checkpoint: bool = True) -> None:
    """Every message back to DLQ, every job to FAILED, no job events and no snapshot; the
    same layout, written out (``checkpoint``). On a connection of its own, without
    queuebot's bounds: a CHECKPOINT on a busy host may take longer than they allow."""
    libpq = conninfo(engine.url.render_as_string(hide_password=False))
    await asyncio.to_thread(_reset, libpq, checkpoint)


def _reset(libpq: str, checkpoint: bool) -> None:
    with psycopg.connect(libpq) as conn:
        with conn.transaction():
            for statement in _statements(RESET):
                conn.execute(statement)
        conn.autocommit = True
        for statement in _statements(SETTLE) + (["CHECKPOINT"] if checkpoint else []):
            conn.execute(statement)


async def count_events(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(sa.text("SELECT count(*) FROM job_events"))
        return int(found.scalar_one())


async def run_floor(
    engine: AsyncEngine, jobs: int, *, snapshot: bool, upto: str | None = None
) -> Run:
    """The set-based step 4 (after step 3, ``snapshot``) in one transaction, the rows
    selected by the statements themselves (``upto``: only the jobs whose id is at most
    that one, the first ``jobs`` by id)."""
    params = {"note": NOTE, "upto": upto}
    bare = BARE.format(upto="" if upto is None else UPTO.format(column="job_id"))
    snap = SNAPSHOT.format(upto="" if upto is None else UPTO.format(column="m.job_id"))
    kept = jobs
    with PeakRss() as rss:
        t0 = time.perf_counter()
        async with engine.begin() as conn:
            if snapshot:
                kept = (await conn.execute(sa.text(snap), params)).rowcount
            t1 = time.perf_counter()
            done = (await conn.execute(sa.text(bare), params)).rowcount
        seconds = time.perf_counter() - t0
    assert kept == jobs, f"the snapshot kept {kept} of {jobs}"
    assert done == jobs, f"the bare statements changed {done} of {jobs}"
    assert await count_events(engine) == jobs
    return Run(jobs=jobs, seconds=seconds, rss=rss, snapshot_s=t1 - t0 if snapshot else 0.0)


async def run_queuebot(
    engine: AsyncEngine, changes: ChangeRequests, ids: list[str], timer: StatementTimer | None
) -> Run:
    """A fresh change request over ``ids`` and its approval, timed together; with a
    ``timer``, the statements of each part are kept as a run of their own."""

    def mark(part: str) -> None:
        assert timer is not None
        timer.stop()
        if part != "done":
            timer.start_run()

    with PeakRss() as rss:
        done = await redrive(changes, "clips", ids, mark=mark if timer is not None else None)
    assert done.changed == len(ids), f"queuebot changed {done.changed} of {len(ids)}"
    events = await count_events(engine)
    assert events == len(ids), events
    return Run(len(ids), done.seconds, rss, request_s=done.request_s, approve_s=done.approve_s)


async def run_manual(engine: AsyncEngine, jobs: int) -> Manual:
    """The runbook's steps 3 and 4, one job at a time, over the first ``jobs`` by job id."""
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT id, job_id FROM queue_messages ORDER BY job_id LIMIT :n"),
            {"n": jobs},
        )
        pairs = [(r[0], r[1]) for r in found]
    result = Manual(jobs=len(pairs))
    for message_id, job_id in pairs:
        s0 = time.perf_counter()
        async with engine.connect() as conn:  # step 3: snapshot candidate rows
            await conn.execute(
                sa.text("select * from queue_messages where id = :m"), {"m": message_id}
            )
            await conn.execute(sa.text("select * from clip_jobs where id = :j"), {"j": job_id})
            await conn.execute(
                sa.text("select * from job_events where aggregate_id = :j order by created_at asc"),
                {"j": job_id},
            )
        s1 = time.perf_counter()
        async with engine.begin() as conn:  # step 4: the transactional reset
            await conn.execute(
                sa.text(
                    "update queue_messages set status = 'PENDING', attempt_count = 0, "
                    "available_at = now(), claimed_at = null, last_error = null "
                    "where id = :m and status = 'DLQ'"
                ),
                {"m": message_id},
            )
            await conn.execute(
                sa.text(
                    "update clip_jobs set status = 'QUEUED', attempt_count = 0, "
                    "progress_percent = 0, finished_at = null, error_message = null "
                    "where id = :j and status = 'FAILED'"
                ),
                {"j": job_id},
            )
            await conn.execute(
                sa.text(
                    "insert into job_events (id, aggregate_id, event_type, message, created_at) "
                    "values (:e, :j, 'REDRIVE_REQUESTED', :msg, now())"
                ),
                {"e": uuid.uuid4(), "j": job_id, "msg": NOTE},
            )
        result.snapshot_s += s1 - s0
        result.update_s += time.perf_counter() - s1
    return result


# -- where the time goes ---------------------------------------------------------------------


_CTE = re.compile(r"(?:^WITH|\),)\s*(\w+) AS (?:MATERIALIZED )?\(")


def shape(sql: str) -> str:
    """A statement as the report groups it: a chain of CTEs by their names, else its
    start."""
    flat = " ".join(sql.split())
    if flat.startswith("WITH "):
        names = _CTE.findall(flat)
        tail = flat.rsplit(")", 1)[-1].strip()[:40]
        return f"WITH {', '.join(names)} {tail}".strip()
    return flat[:100]


@dataclass
class Plan:
    """A statement's plan as auto_explain reported it."""

    part: str  # what ran it: request, approve, bare reset, snapshot + reset
    ms: float
    plan: dict[str, Any]


class Plans:
    """Every statement's plan of at least ``min_ms`` on an engine's connections, from
    ``auto_explain`` (ANALYZE, BUFFERS, JSON) sent to the client as notices."""

    def __init__(self, min_ms: float) -> None:
        self.min_ms = min_ms
        self.part = ""
        self.found: list[Plan] = []

    def attach(self, engine: AsyncEngine) -> None:
        event.listen(engine.sync_engine, "connect", self._connect)

    def _connect(self, dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.driver_connection.add_notice_handler(self._notice)
        cursor = dbapi_conn.cursor()
        for setting in (
            "LOAD 'auto_explain'",
            f"SET auto_explain.log_min_duration = {int(self.min_ms)}",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_buffers = on",
            "SET auto_explain.log_triggers = on",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
        ):
            cursor.execute(setting)
        cursor.close()
        dbapi_conn.commit()

    def _notice(self, diag: Any) -> None:
        head, _, body = (diag.message_primary or "").partition("\n")
        if not head.startswith("duration:") or "plan:" not in head:
            return
        self.found.append(Plan(self.part, float(head.split()[1]), json.loads(body)))


def _node_line(node: dict[str, Any]) -> str:
    loops = int(node.get("Actual Loops", 1) or 1)
    total = float(node.get("Actual Total Time", 0.0)) * loops
    what = node["Node Type"]
    if "Operation" in node and node["Node Type"] == "ModifyTable":
        what = node["Operation"]
    for key, fmt in (
        ("Subplan Name", " [{}]"),
        ("Relation Name", " on {}"),
        ("CTE Name", " on {}"),
        ("Index Name", " using {}"),
        ("Function Name", " of {}"),
    ):
        if key in node:
            what += fmt.format(node[key])
    rows = int(node.get("Actual Rows", 0)) * loops
    io = ""
    hit, read = node.get("Shared Hit Blocks", 0), node.get("Shared Read Blocks", 0)
    dirtied, temp = node.get("Shared Dirtied Blocks", 0), node.get("Temp Written Blocks", 0)
    if hit or read or dirtied or temp:
        io = f"  blocks hit {hit:,} read {read:,} dirtied {dirtied:,}"
        if temp:
            io += f" temp written {temp:,}"
    return f"{total:9.1f} ms  {rows:>9,} rows  x{loops:<6,} {what}{io}"


def _plan_lines(node: dict[str, Any], depth: int, out: list[str]) -> None:
    out.append("  " * depth + _node_line(node))
    for child in node.get("Plans", []):
        _plan_lines(child, depth + 1, out)


def report_plans(plans: list[Plan]) -> None:
    print()
    print(
        "plans (auto_explain, ANALYZE and BUFFERS; not timed runs): each node's time with "
        "its children, per node in all its loops"
    )
    for p in plans:
        text = p.plan.get("Query Text", "")
        print(f"\n  {p.part}: {p.ms:.1f} ms  {shape(text)}")
        out: list[str] = []
        _plan_lines(p.plan["Plan"], 2, out)
        print("\n".join(out))
        for trigger in p.plan.get("Triggers", []):
            print(
                f"      trigger {trigger.get('Trigger Name')} on {trigger.get('Relation')}: "
                f"{trigger.get('Time', 0):.1f} ms, {trigger.get('Calls', 0):,} calls"
            )
        if "Planning Time" in p.plan:
            print(f"      planning {p.plan['Planning Time']:.1f} ms")


async def explain(
    url: str, ids: list[str], args: argparse.Namespace, checkpoint: bool
) -> list[Plan]:
    """One more request and approval, and each floor, on an engine of their own whose
    connections report every plan of at least ``--explain-ms`` (not timed: auto_explain's
    timing adds its own cost)."""
    engine = create_engine(url)
    plans = Plans(args.explain_ms)
    plans.attach(engine)
    try:
        changes = wire(engine, jobs=args.jobs, boards=not args.no_boards).changes

        def mark(part: str) -> None:
            plans.part = part

        await warm(engine, changes)
        await reset(engine, checkpoint)
        await redrive(changes, "clips", ids, mark=mark)
        for name, snapshot in (("bare reset", False), ("snapshot + reset", True)):
            plans.part = ""
            await reset(engine, checkpoint)
            plans.part = name
            await run_floor(engine, len(ids), snapshot=snapshot)
        return [p for p in plans.found if p.part and p.part != "done"]
    finally:
        await engine.dispose()


async def warm(engine: AsyncEngine, changes: ChangeRequests) -> None:
    """The estate's tables reflected, as a running queuebot has them after its first
    command: no measured run pays for that once-a-process read of the catalog."""
    async with engine.connect() as conn:
        await changes.estate.profile("clips").tables(conn)


# -- tracemalloc -----------------------------------------------------------------------------


class TracingTrail(AuditTrail):
    """An audit trail that shows, as each event is appended, what Python holds."""

    async def append(self, conn: Any, **kwargs: Any) -> int:
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        stats = snap.statistics("lineno")
        held = sum(st.size for st in stats)
        print(f"  at {kwargs.get('action')}: {held / 2**20:,.0f} MB held by Python; largest:")
        for st in stats[:12]:
            frame = st.traceback[0]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            print(f"    {st.size / 2**20:8.1f} MB {st.count:>9,} blocks  {where}")
        return await super().append(conn, **kwargs)


async def trace_memory(url: str, jobs: int) -> None:
    engine = create_engine(url)
    try:
        await dead_letters(engine, jobs, then=SETUP)
        ids = await job_ids(engine)
        changes = wire(engine, jobs=jobs, audit=TracingTrail()).changes
        await reset(engine)
        print(f"request + approval of {jobs:,} jobs under tracemalloc:")
        tracemalloc.start()
        await run_queuebot(engine, changes, ids, None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"  peak Python memory during request + approval: {peak / 2**20:,.0f} MB")
    finally:
        await engine.dispose()


# -- the measured rounds ---------------------------------------------------------------------


async def measure(url: str, args: argparse.Namespace) -> Results:
    engine = create_engine(url)
    results = Results(big=Size(args.jobs))
    results.timer.attach(engine)
    try:
        await dead_letters(engine, args.jobs, then=SETUP)
        ids = await job_ids(engine)
        # as serve wires them where the board is shown (Slack): each change asks for its
        # refresh in its transaction (--no-boards: as where it is shown nowhere)
        changes = wire(engine, jobs=args.jobs, boards=not args.no_boards).changes
        await warm(engine, changes)
        small = args.compare_jobs if 0 < args.compare_jobs < args.jobs else 0
        if small:
            results.small = Size(small)
        checkpoint = not args.smoke
        for _ in range(args.repeat):
            results.loads.append(loadavg())
            big = results.big
            await reset(engine, checkpoint)
            big.bare.append(await run_floor(engine, args.jobs, snapshot=False))
            await reset(engine, checkpoint)
            big.snapshot.append(await run_floor(engine, args.jobs, snapshot=True))
            await reset(engine, checkpoint)
            big.queuebot.append(await run_queuebot(engine, changes, ids, results.timer))
            if results.small is not None:
                last = ids[small - 1]
                await reset(engine, checkpoint)
                results.small.queuebot.append(
                    await run_queuebot(engine, changes, ids[:small], None)
                )
                await reset(engine, checkpoint)
                results.small.bare.append(await run_floor(engine, small, snapshot=False, upto=last))
                await reset(engine, checkpoint)
                results.small.snapshot.append(
                    await run_floor(engine, small, snapshot=True, upto=last)
                )
        results.loads.append(loadavg())
        async with engine.connect() as conn:
            assert (await AuditTrail().verify(conn)).ok
        if not args.no_manual and args.manual_jobs > 0:
            await reset(engine, checkpoint)
            results.manual = await run_manual(engine, min(args.jobs, args.manual_jobs))
        if args.explain:
            results.plans = await explain(url, ids, args, checkpoint)
        return results
    finally:
        await engine.dispose()


# -- the report ------------------------------------------------------------------------------


def _median(runs: list[Run]) -> float:
    return statistics.median(r.seconds for r in runs)


def _line(name: str, run: Run) -> str:
    parts = f"{name:<34}{run.seconds * 1000:7.0f} ms  {run.rate:9,.0f} jobs/s"
    if run.request_s:
        parts += f"  (request {run.request_s * 1000:.0f} ms, approve {run.approve_s * 1000:.0f} ms)"
    if run.snapshot_s:
        reset_s = run.seconds - run.snapshot_s
        parts += f"  (snapshot {run.snapshot_s * 1000:.0f} ms, reset {reset_s * 1000:.0f} ms)"
    return parts + f"  RSS {run.rss.idle_mb:.0f} -> peak {run.rss.peak_mb:.0f} MB"


def report_runs(r: Results) -> None:
    print(f"jobs: {r.big.jobs:,} dead-lettered message_job jobs on PostgreSQL")
    for i, (bare, snap, qb) in enumerate(
        zip(r.big.bare, r.big.snapshot, r.big.queuebot, strict=True)
    ):
        print(f"round {i + 1} (load average {r.loads[i]})")
        print(_line("  bare reset:", bare))
        print(_line("  snapshot + reset:", snap))
        print(_line("  queuebot:", qb))
        if r.small is not None:
            n = r.small.jobs
            print(_line(f"  bare reset {n:,}:", r.small.bare[i]))
            print(_line(f"  snapshot + reset {n:,}:", r.small.snapshot[i]))
            print(_line(f"  queuebot {n:,}:", r.small.queuebot[i]))
    print(f"load average after the last round: {r.loads[-1]}")


def judge_size(s: Size) -> list[tuple[str, bool]]:
    """The speed targets at one size, against both floors of the same rounds."""
    bare, snap, qb = _median(s.bare), _median(s.snapshot), _median(s.queuebot)
    request = statistics.median(q.request_s for q in s.queuebot)
    approve = statistics.median(q.approve_s for q in s.queuebot)
    snapshot_s = statistics.median(x.snapshot_s for x in s.snapshot)
    share, of_bare, approval = 100 * snap / qb, 100 * bare / qb, approve / bare
    n = f"{s.jobs:,} jobs"
    print(f"{n}, medians of {len(s.queuebot)}:")
    print(f"  bare reset:              {bare:6.3f} s  ->  {s.jobs / bare:,.0f} jobs/s")
    print(
        f"  snapshot + reset:        {snap:6.3f} s  ->  {s.jobs / snap:,.0f} jobs/s "
        f"(snapshot {snapshot_s * 1000:.0f} ms)"
    )
    print(f"median queuebot:        {qb:6.3f} s  ->  {s.jobs / qb:,.0f} jobs/s")
    print(f"  queuebot request (freeze + snapshot + digest + audit): {request * 1000:8.0f} ms")
    print(f"  queuebot approval (guarded change + events + audit):   {approve * 1000:8.0f} ms")
    print(
        f"  queuebot's jobs/s as a share of the snapshot + reset's: {share:.1f}%; "
        f"of the bare reset's: {of_bare:.1f}%"
    )
    print(f"  approval / bare reset: {approval:.2f}x")
    return [
        (
            f"{n}: queuebot at {share:.1f}% of the snapshot + reset's jobs/s "
            f"(target >= {SHARE:.0f}%)",
            share >= SHARE,
        ),
        (
            f"{n}: approval {approve * 1000:.0f} ms, {approval:.2f}x the bare reset's "
            f"{bare * 1000:.0f} ms (target <= {APPROVAL}x)",
            approval <= APPROVAL,
        ),
    ]


def report_statements(r: Results) -> None:
    """The statements of the measured queuebot runs (``--jobs``), each part apart."""
    runs = r.big.queuebot
    _report_part("request", [q.request_s for q in runs], r.timer.runs[0::2], r.big.jobs)
    _report_part("approval", [q.approve_s for q in runs], r.timer.runs[1::2], r.big.jobs)


def _report_part(part: str, took: list[float], timed: list[list[Statement]], jobs: int) -> None:
    """One part's statements grouped by shape: median per run, slowest first, and what is
    left of the part's time."""
    by_shape: dict[str, list[float]] = {}
    count: dict[str, int] = defaultdict(int)
    for i, run in enumerate(timed):
        for stmt in run:
            name = shape(stmt.sql)
            by_shape.setdefault(name, [0.0] * len(timed))[i] += stmt.seconds
            if i == 0:
                count[name] += 1
    sums = [sum(s.seconds for s in run) for run in timed]
    rest = statistics.median(t - s for t, s in zip(took, sums, strict=True))
    print(
        f"queuebot's {part}, {jobs:,} jobs: {len(timed[0])} statements, "
        f"{statistics.median(sums) * 1000:.0f} ms of {statistics.median(took) * 1000:.0f} ms "
        f"(medians); the rest (Python, pool, commit) {rest * 1000:.0f} ms; the slowest:"
    )
    ranked = sorted(by_shape.items(), key=lambda kv: -statistics.median(kv[1]))
    for name, times in ranked[:10]:
        print(f"  {statistics.median(times) * 1000:8.1f} ms  x{count[name]:<3} {name[:110]}")


def judge_memory(r: Results) -> list[tuple[str, bool]]:
    runs = r.big.queuebot
    idle = runs[0].rss.idle_mb
    peak = max(q.rss.peak_mb for q in runs)
    grew = peak - idle
    floor_grew = max(b.rss.grew_mb for b in [*r.big.bare, *r.big.snapshot])
    print(
        f"RSS idle (estate built, services wired, before the first request): {idle:.0f} MB; "
        f"peak during request + approval: {peak:.0f} MB (highest of {len(runs)}); "
        f"difference {grew:.0f} MB  [{runs[0].rss.method}]"
    )
    print(f"RSS growth during the floors: at most {floor_grew:.1f} MB")
    if r.big.jobs < BIG:
        print(f"(the memory target is judged from {BIG:,} jobs)")
        return []
    return [(f"peak RSS - idle RSS {grew:.0f} MB (target <= {MEMORY_MB:.0f})", grew <= MEMORY_MB)]


def judge_scaling(r: Results) -> list[tuple[str, bool]]:
    if r.small is None:
        return []
    big, small = _median(r.big.queuebot), _median(r.small.queuebot)
    ratio, linear = big / small, r.big.jobs / r.small.jobs
    print(
        f"scaling: {r.big.jobs:,} jobs {big:.2f} s against {r.small.jobs:,} jobs {small:.2f} s "
        f"(medians): {ratio:.1f}x for {linear:.0f}x the jobs"
    )
    for name, b, s in (
        ("bare reset", r.big.bare, r.small.bare),
        ("snapshot + reset", r.big.snapshot, r.small.snapshot),
    ):
        print(
            f"  the {name} on the same host: {_median(b):.2f} s against {_median(s):.2f} s: "
            f"{_median(b) / _median(s):.1f}x (not judged: how the database itself scales)"
        )
    if r.big.jobs < BIG:
        print(f"(the scaling target is judged from {BIG:,} jobs)")
        return []
    return [
        (
            f"time {ratio:.1f}x the {r.small.jobs:,}-job time (target <= {linear:.0f}x)",
            ratio <= linear,
        )
    ]


def report_manual(r: Results) -> None:
    m = r.manual
    if m is None:
        print("manual runbook per job: not run")
        return
    rate = r.big.jobs / _median(r.big.queuebot)
    manual_rate = m.jobs / m.seconds
    print(
        f"manual runbook per job, steps 3 + 4, {m.jobs:,} jobs: {m.seconds:6.2f} s  ->  "
        f"{manual_rate:,.0f} jobs/s (snapshot {m.snapshot_s:.2f} s, reset {m.update_s:.2f} s)"
    )
    print(
        f"queuebot's jobs/s: {rate / manual_rate:.1f}x the per-job steps 3 + 4; "
        f"{rate / (m.jobs / m.update_s):.1f}x step 4 alone (not judged: the set-based "
        "snapshot + reset is the floor)"
    )


def report(r: Results, smoke: bool) -> int:
    report_runs(r)
    print()
    checks = judge_size(r.big)
    if r.small is not None:
        print()
        checks += judge_size(r.small)
    print()
    report_statements(r)
    print()
    checks += judge_memory(r) + judge_scaling(r)
    report_manual(r)
    if r.plans:
        report_plans(r.plans)
    return judge(checks, smoke)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--jobs", full=10_000, smoke=300, help="dead letters redriven")
    parser.size("--repeat", full=3, smoke=1, help="alternating runs of each")
    parser.size("--compare-jobs", full=10_000, smoke=100, help="smaller run when --jobs exceeds it")
    parser.size("--manual-jobs", full=10_000, smoke=50, help="jobs the per-job procedure takes")
    parser.add_argument("--no-manual", action="store_true", help="skip the per-job procedure")
    parser.add_argument(
        "--no-boards",
        action="store_true",
        help="wired as where the board is shown nowhere: no change asks for its refresh",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="then one more run of each under auto_explain: their plans, node by node",
    )
    parser.add_argument(
        "--explain-ms",
        type=float,
        default=5.0,
        help="the plans --explain prints: statements of at least this many ms (5)",
    )
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="show where one request + approval's memory goes (tracemalloc), measure nothing",
    )
    args = parser.read(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"load average at start: {loadavg()}  ({os.cpu_count()} CPUs)")
    name, url = create(args.url, DB)  # this run's own: concurrent runs never collide
    if args.trace_memory:
        try:
            asyncio.run(trace_memory(url, args.jobs))
        finally:
            drop(args.url, name)
        return 0
    try:
        results = asyncio.run(measure(url, args))
    finally:
        drop(args.url, name)
    print(f"load average at end:   {loadavg()}")
    return report(results, args.smoke)


if __name__ == "__main__":
    exit_with(main)
