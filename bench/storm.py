"""An alert storm during incidents: 300 alert groups firing and updating for 2 minutes
while 10 incidents with deadlines of 5 to 60 s run, at Slack's pace.

Builds a scratch PostgreSQL database of its own (``qb_bench_storm_<pid>_<random>``,
migrated, with the demo estate; dropped at the end), starts the local fake Slack taking
at most one chat.postMessage per channel per second (a sooner one is answered 429 with
``Retry-After: 1``) and the real ``queuebot serve`` as a subprocess, paced as in
production (``[slack] post_interval_seconds = 1``), with the built-in detectors off.

The storm (``testkit/storm.py``): ``--groups`` groups routed by their ``team`` label to
``--channels`` channels (``C0STORM0`` ...), each firing in the first 20 s, one more of its
alerts firing every 10 s, Alertmanager's unchanged repeat every 5 s in between, and all of
them resolved at the storm's end (``--minutes``, 2). Ten sender threads post the
notifications to ``POST /alerts/alertmanager`` at their moments.

The incidents: ``--incidents`` (10) drills of the shipped queue-loss runbook, each its own
scenario with the operators told within 5 to 50 s and the actors within 60 to 33 s (times
``--window-scale``),
declared by Dora's signed ``/incident declare`` from a channel of its own (``C0INC0`` ...)
at moments spread over the storm. Nobody tells anyone, so each audience gets a reminder
at half and at 80% of its window and an escalation at its deadline, in the incident's
thread and in the operators' channel (``C0OPS``).

It prints, per kind of post, the lag after the moment it was due (p50, p99, max): the
checklist after the declaration's acknowledgement, each reminder at its fraction, each
escalation at its deadline, each group's root after its first notification was answered,
and each group's final state (its root showing it resolved, the resolution in its thread)
after the storm's end; each channel's posts, posts per second, the most in any one
second and the 429s; how many queued alert posts the outbox superseded.

Targets: reminders and escalations posted within 5 s of their due time (p99); every
group's final state posted within 30 s of the storm's end; no channel's pace exceeded (no
429, never two posts in one second). Exit status: 0 pass, 1 fail, 2 error, 130 interrupted.

    .venv/bin/python -m bench.storm [--url ADMIN_URL] [--minutes 2] [--groups 300]
                                    [--channels 15] [--incidents 10]
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import psycopg

from bench.kit.cli import BenchParser, exit_with
from bench.kit.figures import judge, loadavg
from bench.kit.scratch import conninfo, scratch
from bench.kit.serve import (
    ALERT_TOKEN,
    DETECTORS_OFF,
    Serve,
    build_demo,
    slack_env,
    start_serve,
    wait_healthy,
)
from testkit import web
from testkit.fake_slack import FakeSlack
from testkit.slack_requests import signed, slash_fields
from testkit.storm import (
    Answered,
    Send,
    Storm,
    final_states,
    incident_dues,
    incident_lags,
    paces,
    percentile,
    root_lags,
    storm_toml,
)

DB_PREFIX = "qb_bench_storm"
DORA = "U0DORA"  # the demo's operations duty officer
REMIND_AT = (0.5, 0.8)  # queuebot's default reminders
SENDERS = 10
TARGET_ON_TIME = 5.0  # seconds: reminders and escalations, p99
TARGET_SETTLED = 30.0  # seconds after the storm: every group's final state
RUNBOOK = Path(__file__).resolve().parents[1] / "services" / "runbooks" / "shipped"

BENCH_CONFIG = (
    """
[slack]
post_interval_seconds = 1        # Slack's pace per channel, as in production
"""
    + DETECTORS_OFF
    + """
[runbooks]
dir = "runbooks"
"""
)


# -- the set-up ------------------------------------------------------------------------------


def windows(incident: int, incidents: int, scale: float = 1.0) -> tuple[int, int]:
    """The operators' and the actors' windows of incident ``incident``, in ms: 5 to 50 s
    and 60 to 33 s across the incidents, times ``scale``."""
    share = incident / max(1, incidents - 1)
    return round((5_000 + 45_000 * share) * scale), round((60_000 - 27_000 * share) * scale)


def write_runbooks(folder: Path, incidents: int, scale: float) -> None:
    """The shipped queue-loss runbook once per incident, as its own scenario
    ``gd:storm-N`` with that incident's windows."""
    text = (RUNBOOK / "queue-loss.md").read_text()
    folder.mkdir(exist_ok=True)
    for n in range(incidents):
        operators, actors = windows(n, incidents, scale)
        drill = text.replace('"gd:queue-loss"', f'"gd:storm-{n}"').replace(
            '"runbook:queue-loss"', f'"runbook:storm-{n}"'
        )
        drill = drill.replace('"withinMs": 900000', f'"withinMs": {actors}').replace(
            '"withinMs": 300000', f'"withinMs": {operators}'
        )
        assert drill.count(f'"withinMs": {actors}') == 1, "the runbook's windows changed"
        (folder / f"storm-{n}.md").write_text(drill)


def start(workdir: Path, db_url: str, fake: FakeSlack, storm: Storm) -> Serve:
    serve = start_serve(
        workdir,
        db_url,
        env=slack_env(fake),
        config=BENCH_CONFIG + storm_toml(storm.channels),
        stop_within=30.0,
    )
    wait_healthy(serve)
    return serve


def warm_up(serve: Serve, fake: FakeSlack) -> float:
    """One alert group, until its root is posted: serve's worker is up. Seconds taken."""
    started = time.monotonic()
    body = Storm(groups=1, channels=1, seconds=0).body(0, 1)
    body["groupLabels"] = body["commonLabels"] = {"alertname": "Warmup"}
    body["groupKey"] = '{}:{alertname="Warmup"}'
    answer = web.post(
        f"{serve.url}/alerts/alertmanager",
        json=body,
        headers={"authorization": f"Bearer {ALERT_TOKEN}"},
        timeout=30,
    )
    answer.raise_for_status()
    fake.wait_for(lambda call: str(call.body.get("text", "")).startswith("Warmup"), timeout=120)
    return time.monotonic() - started


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Declared:
    incident: int
    acked: float  # monotonic, when the command was acknowledged
    answer: str


def declare(serve: Serve, fake: FakeSlack, n: int) -> Declared:
    """Dora's `/incident declare gd:storm-N` from channel C0INC<N>."""
    name = f"declare-{n}-{time.time_ns()}"
    fields = slash_fields(
        fake, f'declare gd:storm-{n} "storm drill {n}"', name=name, user=DORA, trigger=name
    )
    body = urlencode({**fields, "command": "/incident", "channel_id": f"C0INC{n}"})
    answer = web.post(f"{serve.url}/slack/events", content=body, headers=signed(body), timeout=30)
    acked = time.monotonic()
    answer.raise_for_status()
    said = fake.wait_for(lambda call: call.path == f"/response/{name}", timeout=60)[-1]
    return Declared(n, acked, str(said.body.get("text", "")))


def send_storm(url: str, storm: Storm, started: float, answered: Answered) -> list[str]:
    """Alertmanager's side: each notification posted at its moment by one of ``SENDERS``
    threads (one group's notifications by one thread, in order). Errors, if any."""
    lanes: list[queue.Queue[Send | None]] = [queue.Queue() for _ in range(SENDERS)]
    errors: list[str] = []
    lock = threading.Lock()

    def sender(lane: queue.Queue[Send | None]) -> None:
        headers = {"authorization": f"Bearer {ALERT_TOKEN}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            while (s := lane.get()) is not None:
                try:
                    status = client.post("/alerts/alertmanager", json=s.body).status_code
                except httpx.HTTPError as exc:
                    status = 0
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                with lock:
                    answered.record(s, status, time.monotonic())

    threads = [threading.Thread(target=sender, args=(lane,), daemon=True) for lane in lanes]
    for thread in threads:
        thread.start()
    for s in storm.sends():
        time.sleep(max(0.0, started + s.at - time.monotonic()))
        lanes[s.group % SENDERS].put(s)
    for lane in lanes:
        lane.put(None)
    for thread in threads:
        thread.join()
    return errors


def obligations(db: psycopg.Connection[Any]) -> list[tuple[int, str, float, float]]:
    """(incident, audience, declared at, due at) of every obligation, in monotonic time."""
    offset = time.time() - time.monotonic()
    rows = db.execute(
        "SELECT o.incident_id, o.audience, i.declared_at, o.due_at "
        "FROM qb_incident_obligations o JOIN qb_incidents i ON i.id = o.incident_id"
    ).fetchall()
    return [
        (int(n), str(audience), declared.timestamp() - offset, due.timestamp() - offset)
        for n, audience, declared, due in rows
    ]


def spread(values: Sequence[float]) -> str:
    if not values:
        return "none"
    return (
        f"p50 {percentile(values, 0.5):.2f} s, p99 {percentile(values, 0.99):.2f} s, "
        f"max {max(values):.2f} s ({len(values)})"
    )


def run(args: argparse.Namespace, db_url: str, workdir: Path) -> int:
    storm = Storm(
        groups=args.groups,
        channels=args.channels,
        seconds=args.minutes * 60,
        fire_within=min(20.0, args.minutes * 60 / 4),
        change_every=10.0,
        repeat_every=5.0,
    )
    write_runbooks(workdir / "runbooks", args.incidents, args.window_scale)
    fake = FakeSlack().start()
    fake.pace(1.0, retry_after=1)
    serve: Serve | None = None
    db = psycopg.connect(conninfo(db_url), autocommit=True)
    keep_log = False
    try:
        t0 = time.monotonic()
        serve = start(workdir, db_url, fake, storm)
        print(f"queuebot serve up in {time.monotonic() - t0:.1f}s (pid {serve.proc.pid})")
        print(f"warm-up: one group's root posted in {warm_up(serve, fake):.1f}s")
        sends = storm.sends()
        print(
            f"storm: {storm.groups} groups in {storm.channels} channels for {storm.seconds:.0f}s, "
            f"{len(sends):,} notifications ({sum(s.what == 'change' for s in sends):,} changes); "
            f"{args.incidents} incidents; fake Slack: 1 post/s per channel, 429 Retry-After 1"
        )
        print(f"load average before: {loadavg()}", flush=True)
        answered = Answered()
        started = time.monotonic()
        storm_errors: list[str] = []
        storming = threading.Thread(
            target=lambda: storm_errors.extend(send_storm(serve.url, storm, started, answered))
        )
        storming.start()
        declared: list[Declared] = []
        for n in range(args.incidents):  # spread over the storm's first three quarters
            at = started + storm.seconds * (0.08 + 0.67 * n / max(1, args.incidents - 1))
            time.sleep(max(0.0, at - time.monotonic()))
            declared.append(declare(serve, fake, n))
        storming.join()
        ended = time.monotonic()
        print(f"storm sent in {ended - started:.1f}s; {answered.refused} not answered 200")
        owed = incident_dues(obligations(db), REMIND_AT)
        last_due = max((d.at for d in owed), default=ended)
        deadline = max(ended + TARGET_SETTLED + 60, last_due + 30)
        settle = 0.0 if args.smoke else TARGET_ON_TIME  # posts due last, given their time
        if args.smoke:  # too small for the targets: what is posted by then is printed
            deadline = max(ended, last_due) + 2 * TARGET_ON_TIME
        while time.monotonic() < deadline:
            finals = final_states(fake, storm)
            lags = incident_lags(fake, owed)
            if time.monotonic() > last_due + settle and all(
                v is not None for v in (*finals.values(), *lags.values())
            ):
                break
            time.sleep(0.5)
        print(f"load average after: {loadavg()}")
        return report(args, storm, fake, db, declared, owed, answered, ended, storm_errors)
    except BaseException:
        keep_log = True
        raise
    finally:
        if serve is not None:
            troubled = serve.close()
            if troubled or keep_log or args.keep_log:
                kept = Path(tempfile.gettempdir()) / f"qb_bench_storm_{os.getpid()}.log"
                shutil.copy(serve.log, kept)
                print(f"serve log kept in {kept}")
        fake.stop()
        db.close()


def report(
    args: argparse.Namespace,
    storm: Storm,
    fake: FakeSlack,
    db: psycopg.Connection[Any],
    declared: list[Declared],
    owed: Sequence[Any],
    answered: Answered,
    ended: float,
    storm_errors: list[str],
) -> int:
    lags = incident_lags(fake, owed)
    finals = final_states(fake, storm)
    channels = paces(fake)
    checklists = {
        int(m.group(1)): call.at
        for call in fake.recorded("/api/chat.postMessage")
        if (m := re.match(r"INC-(\d+) declared", str(call.body.get("text", ""))))
    }
    by_kind: dict[str, list[float]] = {}
    for due, lag in lags.items():
        if lag is not None:
            by_kind.setdefault(due.kind, []).append(lag)
    checklist = [  # the incidents are numbered in the order they were declared
        checklists[n + 1] - d.acked for n, d in enumerate(declared) if n + 1 in checklists
    ]
    settled = [at - ended for at in finals.values() if at is not None]
    missing_incident = [
        f"{d.kind} INC-{d.incident} {d.audience}" for d, lag in lags.items() if lag is None
    ]
    superseded, delivered = db.execute(
        "SELECT count(*) FILTER (WHERE superseded_by IS NOT NULL), "
        "count(*) FILTER (WHERE superseded_by IS NULL AND done_at IS NOT NULL) "
        "FROM qb_outbox WHERE kind = 'alert.post'"
    ).fetchone() or (0, 0)

    print()
    answered_declared = sum("declared" in d.answer for d in declared)
    print(f"incidents declared: {len(declared)} ({answered_declared} answered 'declared')")
    print(f"  checklist after the ack:        {spread(checklist)}")
    for kind in ("reminder", "escalation (thread)", "escalation (channel)"):
        print(f"  {kind + ' after due:':<32}{spread(by_kind.get(kind, []))}")
    on_time = [lag for kind in by_kind for lag in by_kind[kind]]
    print(
        f"  reminders and escalations:      {spread(on_time)}; "
        f"never posted: {len(missing_incident)}"
    )
    roots = root_lags(fake, storm, answered)
    print(f"alert groups: {storm.groups}; roots after the first notification: {spread(roots)}")
    print(
        f"  final state after the storm's end: {spread(settled)}; "
        f"not posted: {sum(v is None for v in finals.values())}"
    )
    print(f"  alert posts delivered {delivered:,}, superseded while queued {superseded:,}")
    print("channels (posts, posts/s over its span, most in one second, 429s):")
    for channel, p in channels.items():
        print(
            f"  {channel:<10} {p.posts:>5} {p.per_second:>6.2f}/s "
            f"{p.most_in_a_second:>3} {p.refused:>4}"
        )
    if storm_errors:
        print(f"storm errors: {len(storm_errors)}, first: {storm_errors[0]}")

    p99 = percentile(on_time, 0.99) if on_time else float("inf")
    worst = max(settled) if settled else float("inf")
    checks = [
        (
            f"reminders and escalations p99 {p99:.2f} s <= {TARGET_ON_TIME:.0f} s, none missing",
            p99 <= TARGET_ON_TIME and not missing_incident,
        ),
        (
            f"every group's final state within {TARGET_SETTLED:.0f} s of the storm's end "
            f"(slowest {worst:.1f} s)",
            len(settled) == storm.groups and worst <= TARGET_SETTLED,
        ),
        (
            "no channel's pace exceeded (no 429, at most one post in any second)",
            all(p.refused == 0 and p.most_in_a_second <= 1 for p in channels.values()),
        ),
        ("every notification answered 200", answered.refused == 0 and not storm_errors),
    ]
    return judge(checks, args.smoke)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = BenchParser(__doc__)
    parser.size("--minutes", full=2.0, smoke=0.05, type=float, help="the storm's length")
    parser.size("--groups", full=300, smoke=4, help="alert groups")
    parser.size("--channels", full=15, smoke=2, help="alert channels")
    parser.size("--incidents", full=10, smoke=1, help="incidents")
    parser.size(
        "--window-scale",
        full=1.0,
        smoke=0.1,
        type=float,
        help="the incidents' windows, times this",
    )
    parser.serve_options(log_level=False)
    args = parser.read(argv)
    if (
        min(args.minutes, args.window_scale) <= 0
        or min(args.groups, args.channels, args.incidents) < 1
    ):
        parser.error(
            "--minutes, --groups, --channels, --incidents and --window-scale must be positive"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="qb_bench_storm_"))
    try:
        with scratch(args.url, DB_PREFIX) as (_, db_url):
            build_demo(db_url)
            return run(args, db_url, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    exit_with(main)
