"""Redrive N dead-lettered message_job jobs on PostgreSQL, queuebot against bare SQL.

One scratch database, one estate of ``--jobs`` dead letters (default 10,000), reset to
its dead state before every measured thing. What is measured:

1. queuebot: one change request (freeze, the snapshot of every row kept as the request's
   items with its digest, audit) and one approval that runs the guarded set-based update,
   writes a REDRIVE_REQUESTED event per job, records each changed row as an outcome
   (with its before-image where it differs from the frozen one) and the audit event with
   their digest, in one transaction. Request and approval are both inside the timed part;
   the ids of every job are passed to the request.
2. the bare statements: the redrive procedure's step 4 done set-based in one transaction,
   as a DBA would type it by hand over all the dead letters. The statement selects the
   rows itself (``WHERE status = 'DLQ'``, no id list is sent) and chains the three changes
   with data-modifying CTEs: the messages to PENDING, their FAILED jobs to QUEUED, and a
   REDRIVE_REQUESTED event for each job just changed. Nothing comes back to the process.
   The two alternate, ``--repeat`` times each (default 3); each run's figures and the
   medians are printed, and queuebot's jobs/s as a percentage of the bare statements'.
3. memory: the process's RSS before each queuebot request (idle: the estate built, the
   services wired) and its peak during request + approval. The peak is VmHWM after
   writing "5" to /proc/self/clear_refs (which resets it to the current RSS); where that
   file is not writable, VmRSS is sampled every 5 ms from a thread instead (printed).
4. scaling: when ``--jobs`` exceeds ``--compare-jobs`` (default 10,000), request +
   approval over the first ``--compare-jobs`` jobs (by id) is timed too, in the same
   rounds, and the time ratio big / small is printed; so are the bare statements over
   those jobs (``job_id <=`` the last of them) and their own ratio, not judged: how the
   database itself scales on the host.
5. the manual redrive runbook's procedure, one job at a time through the same engine, over
   at most ``--manual-jobs`` jobs (default 10,000; ``--no-manual`` skips it): step 3
   (snapshot: SELECT * of the message, the job and its events) and step 4 (BEGIN; UPDATE
   queue_messages; UPDATE clip_jobs; INSERT job_events; COMMIT). queuebot does the work of
   both steps (it snapshots every row before changing it), so the target compares against
   steps 3 + 4, in jobs/s; the step-4-only figure is printed beside it.

The reset returns every message to DLQ and every job to FAILED, empties job_events,
rewrites both tables in id order (CLUSTER), then VACUUM ANALYZE and CHECKPOINT, so
every measured run starts from the same physical state (``--smoke``, which measures
nothing, leaves the CHECKPOINT out: it is the whole server's). Autovacuum is off on the estate
tables of the scratch database so that it never starts in the middle of a run.

Targets (PASS/FAIL each; exit 0 only when every one measured passes):
queuebot >= 5,000 jobs/s; queuebot >= 50% of the bare statements' jobs/s; >= 20x the
per-job steps 3 + 4 (when they ran); and with ``--jobs`` >= 100,000: peak RSS - idle RSS
<= 100 MB, and the time <= linear in jobs against the ``--compare-jobs`` run (10x for
100,000 against 10,000).

    .venv/bin/python -m bench.redrive [--url ADMIN_URL] [--jobs 10000] [--repeat 3]
        [--compare-jobs 10000] [--manual-jobs 10000] [--no-manual] [--no-boards]

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
import os
import statistics
import threading
import time
import tracemalloc
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.kit.changes import FOR_REDRIVE, dead_letters, job_ids, redrive, wire
from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import judge, loadavg, status_mb
from bench.kit.scratch import create, drop
from services.audit import AuditTrail
from services.changes.requests import ChangeRequests
from services.db import create_engine

DB = "qb_bench_redrive"
BIG = 100_000  # the memory and scaling targets are judged from this many jobs
MEMORY_MB = 100.0
NOTE = "Operator returned DLQ message to PENDING after root-cause fix"
ESTATE_TABLES = ("queue_messages", "clip_jobs", "job_events")

RESET = """
UPDATE queue_messages SET status = 'DLQ', attempt_count = 3, claimed_at = now(),
       last_error = 'ffmpeg exited with code 137';
UPDATE clip_jobs SET status = 'FAILED', attempt_count = 3, progress_percent = 20,
       finished_at = now(), error_message = 'ffmpeg exited with code 137';
TRUNCATE job_events;
"""
SETTLE = """
CLUSTER clip_jobs USING clip_jobs_pkey;
CLUSTER queue_messages USING bench_qm_job;
VACUUM (ANALYZE) queue_messages, clip_jobs, job_events;
"""
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
    """One measured redrive: its time (request and approval apart for queuebot) and RSS."""

    jobs: int
    seconds: float
    rss: PeakRss
    request_s: float = 0.0
    approve_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


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
    jobs: int
    bare: list[Run] = field(default_factory=list)
    queuebot: list[Run] = field(default_factory=list)
    small: list[Run] = field(default_factory=list)
    small_bare: list[Run] = field(default_factory=list)
    manual: Manual | None = None


async def reset(engine: AsyncEngine, checkpoint: bool = True) -> None:
    """Every message back to DLQ, every job to FAILED, no job events; the same layout,
    written out (``checkpoint``)."""
    async with engine.begin() as conn:
        for statement in _statements(RESET):
            await conn.execute(sa.text(statement))
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        for statement in _statements(SETTLE) + (["CHECKPOINT"] if checkpoint else []):
            await conn.execute(sa.text(statement))


async def count_events(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(sa.text("SELECT count(*) FROM job_events"))
        return int(found.scalar_one())


async def run_bare(engine: AsyncEngine, jobs: int, upto: str | None = None) -> Run:
    """The set-based step 4 in one transaction, ids selected by the statement itself
    (``upto``: only the jobs whose id is at most that one, the first ``jobs`` by id)."""
    sql = BARE.format(upto="" if upto is None else " AND job_id <= CAST(:upto AS uuid)")
    with PeakRss() as rss:
        t0 = time.perf_counter()
        async with engine.begin() as conn:
            done = (await conn.execute(sa.text(sql), {"note": NOTE, "upto": upto})).rowcount
        seconds = time.perf_counter() - t0
    assert done == jobs, f"the bare statements changed {done} of {jobs}"
    assert await count_events(engine) == jobs
    return Run(jobs=jobs, seconds=seconds, rss=rss)


async def run_queuebot(engine: AsyncEngine, changes: ChangeRequests, ids: list[str]) -> Run:
    """A fresh change request over ``ids`` and its approval, timed together."""
    with PeakRss() as rss:
        done = await redrive(changes, "clips", ids)
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
        await dead_letters(engine, jobs, then=FOR_REDRIVE)
        ids = await job_ids(engine)
        changes = wire(engine, jobs=jobs, audit=TracingTrail()).changes
        await reset(engine)
        print(f"request + approval of {jobs:,} jobs under tracemalloc:")
        tracemalloc.start()
        await run_queuebot(engine, changes, ids)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"  peak Python memory during request + approval: {peak / 2**20:,.0f} MB")
    finally:
        await engine.dispose()


async def measure(url: str, args: argparse.Namespace) -> Results:
    engine = create_engine(url)
    try:
        await dead_letters(engine, args.jobs, then=FOR_REDRIVE)
        ids = await job_ids(engine)
        # as serve wires them where the board is shown (Slack): each change asks for its
        # refresh in its transaction (--no-boards: as where it is shown nowhere)
        changes = wire(engine, jobs=args.jobs, boards=not args.no_boards).changes
        results = Results(jobs=args.jobs)
        small = args.compare_jobs if 0 < args.compare_jobs < args.jobs else 0
        checkpoint = not args.smoke
        for _ in range(args.repeat):
            await reset(engine, checkpoint)
            results.bare.append(await run_bare(engine, args.jobs))
            await reset(engine, checkpoint)
            results.queuebot.append(await run_queuebot(engine, changes, ids))
            if small:
                await reset(engine, checkpoint)
                results.small.append(await run_queuebot(engine, changes, ids[:small]))
                await reset(engine, checkpoint)
                results.small_bare.append(await run_bare(engine, small, upto=ids[small - 1]))
        async with engine.connect() as conn:
            assert (await AuditTrail().verify(conn)).ok
        if not args.no_manual and args.manual_jobs > 0:
            await reset(engine, checkpoint)
            results.manual = await run_manual(engine, min(args.jobs, args.manual_jobs))
        return results
    finally:
        await engine.dispose()


def _median(runs: list[Run]) -> float:
    return statistics.median(r.seconds for r in runs)


def _line(name: str, run: Run) -> str:
    parts = f"{name:<30}{run.seconds * 1000:7.0f} ms  {run.rate:9,.0f} jobs/s"
    if run.request_s:
        parts += f"  (request {run.request_s * 1000:.0f} ms, approve {run.approve_s * 1000:.0f} ms)"
    return parts + f"  RSS {run.rss.idle_mb:.0f} -> peak {run.rss.peak_mb:.0f} MB"


def report_runs(r: Results) -> None:
    print(f"jobs: {r.jobs:,} dead-lettered message_job jobs on PostgreSQL")
    for i, (bare, qb) in enumerate(zip(r.bare, r.queuebot, strict=True), 1):
        print(_line(f"run {i}  bare statements:", bare))
        print(_line(f"run {i}  queuebot:", qb))
        if r.small:
            print(_line(f"run {i}  queuebot {r.small[i - 1].jobs:,}:", r.small[i - 1]))
            print(_line(f"run {i}  bare {r.small_bare[i - 1].jobs:,}:", r.small_bare[i - 1]))
    request = statistics.median(q.request_s for q in r.queuebot)
    approve = statistics.median(q.approve_s for q in r.queuebot)
    print(f"queuebot request (freeze + snapshot + hash + audit), median: {request * 1000:8.0f} ms")
    print(f"queuebot approve (guarded update + events + audit), median:  {approve * 1000:8.0f} ms")


def judge_speed(r: Results) -> list[tuple[str, bool]]:
    bare, qb = _median(r.bare), _median(r.queuebot)
    rate = r.jobs / qb
    share = 100 * bare / qb
    print(f"median bare statements: {bare:6.2f} s  ->  {r.jobs / bare:,.0f} jobs/s")
    print(f"median queuebot:        {qb:6.2f} s  ->  {rate:,.0f} jobs/s")
    print(f"queuebot jobs/s as a share of the bare statements' jobs/s: {share:.1f}%")
    return [
        (f"queuebot {rate:,.0f} jobs/s (target >= 5,000)", rate >= 5000),
        (f"queuebot at {share:.1f}% of the bare statements' jobs/s (target >= 50%)", share >= 50),
    ]


def judge_memory(r: Results) -> list[tuple[str, bool]]:
    idle = r.queuebot[0].rss.idle_mb
    peak = max(q.rss.peak_mb for q in r.queuebot)
    grew = peak - idle
    bare_grew = max(b.rss.grew_mb for b in r.bare)
    print(
        f"RSS idle (estate built, services wired, before the first request): {idle:.0f} MB; "
        f"peak during request + approval: {peak:.0f} MB (highest of {len(r.queuebot)}); "
        f"difference {grew:.0f} MB  [{r.queuebot[0].rss.method}]"
    )
    print(f"RSS growth during the bare statements: at most {bare_grew:.1f} MB")
    if r.jobs < BIG:
        print(f"(the memory target is judged from {BIG:,} jobs)")
        return []
    return [(f"peak RSS - idle RSS {grew:.0f} MB (target <= {MEMORY_MB:.0f})", grew <= MEMORY_MB)]


def judge_scaling(r: Results) -> list[tuple[str, bool]]:
    if not r.small:
        return []
    big, small = _median(r.queuebot), _median(r.small)
    ratio, linear = big / small, r.jobs / r.small[0].jobs
    print(
        f"scaling: {r.jobs:,} jobs {big:.2f} s against {r.small[0].jobs:,} jobs {small:.2f} s "
        f"(medians): {ratio:.1f}x for {linear:.0f}x the jobs"
    )
    bare_big, bare_small = _median(r.bare), _median(r.small_bare)
    print(
        f"the bare statements on the same host: {bare_big:.2f} s against {bare_small:.2f} s: "
        f"{bare_big / bare_small:.1f}x (not judged: how the database itself scales here)"
    )
    if r.jobs < BIG:
        print(f"(the scaling target is judged from {BIG:,} jobs)")
        return []
    return [
        (
            f"time {ratio:.1f}x the {r.small[0].jobs:,}-job time (target <= {linear:.0f}x)",
            ratio <= linear,
        )
    ]


def judge_manual(r: Results) -> list[tuple[str, bool]]:
    m = r.manual
    if m is None:
        print("manual runbook per job: not run")
        return []
    rate = r.jobs / _median(r.queuebot)
    manual_rate = m.jobs / m.seconds
    ratio = rate / manual_rate
    print(
        f"manual runbook per job, steps 3 + 4, {m.jobs:,} jobs: {m.seconds:6.2f} s  ->  "
        f"{manual_rate:,.0f} jobs/s (snapshot {m.snapshot_s:.2f} s, reset {m.update_s:.2f} s)"
    )
    print(
        f"speed-up in jobs/s: {ratio:.1f}x against steps 3 + 4  (target >= 20x); "
        f"{rate / (m.jobs / m.update_s):.1f}x against step 4 alone"
    )
    return [(f"{ratio:.1f}x the per-job steps 3 + 4 (target >= 20x)", ratio >= 20)]


def report(r: Results, smoke: bool) -> int:
    report_runs(r)
    return judge(judge_speed(r) + judge_memory(r) + judge_scaling(r) + judge_manual(r), smoke)


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
