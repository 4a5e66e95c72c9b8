"""The reliability suite's harness: real `queuebot serve` processes on one fresh PostgreSQL
database, the fake Slack, Slack deliveries kept byte for byte so that they can be sent
again (a retry or a second click carries the same trigger_id or action_ts, so the same
ledger key), a stand-in for the queue's workers, and the figures each test writes down.

Every serve this harness starts gets recognisable fake secrets (``MARK`` is in each), and
``Cluster.close`` checks each log it produced for them and for tracebacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import psycopg

from bot.bootstrap import wire_services
from bot.demo import DEMO_CONFIG
from services.audit import AuditTrail
from services.config import ApprovalConfig, RedriveConfig, default_queues
from services.db import create_engine
from services.estate.estate import Estate, utcnow
from services.estate.ops import Selector
from services.reads import samples
from testkit import web
from testkit.fake_slack import Call, FakeSlack
from testkit.ports import free_port
from testkit.slack_requests import signed, slash_fields
from tests.conftest import _pg_conninfo
from tests.e2e.serving import ALERT_TOKEN, demo_database, port_taken
from tests.helpers import launch
from tests.helpers.config import DETECTORS_OFF
from tests.helpers.people import ALICE_ON_SLACK
from tests.helpers.platforms import button_click
from tests.helpers.processes import clean_environ, stop
from tests.kinds import ChangeKind

# Fake secrets, each holding MARK so that a grep for MARK finds any of them, whole or cut.
MARK = "QBREL7"
BOT_TOKEN = f"xoxb-{MARK}-bot-4f1d9c2a77e0"
SIGNING_SECRET = f"{MARK}-signing-b83e0d6a51c4"
APP_TOKEN = f"xapp-1-{MARK}-app-c19e72d0"
DB_PASSWORD = f"{MARK}-dbpass-2a8f61ce"
AUDIT_KEY = f"{MARK}-audit-key-0d7c35e19a4b6f28"

STALE_SECONDS = 5.0  # QUEUEBOT_CLAIM_STALE_SECONDS for every serve here: the lowest allowed

# The demo configuration, plus what every scenario needs: one approval executes a
# request of a few hundred rows, and plans poll quickly with no velocity cap to wait for.
# Posts are not paced (the scenarios count them, not wait for Slack's pace), and the
# detectors are off (the demo's failed jobs would add an alert thread to every count).
BASE_TOML = (
    """\
large_change_rows = 5000

[slack]
post_interval_seconds = 0

"""
    + DETECTORS_OFF
    + """
[redrive]
poll_seconds = 0.2
velocity = 100000
"""
)

# Plans of many small waves: a sample of 5, then waves of 5 and 10.
PLAN_TOML = "first_wave = 5\nmax_wave = 10\n"

EVENTS = (  # REDRIVE_REQUESTED job events of the jobs given
    "SELECT count(*) FROM job_events WHERE event_type = 'REDRIVE_REQUESTED' "
    "AND aggregate_id = ANY(CAST(%s AS uuid[]))"
)


# -- figures ----------------------------------------------------------------------------


class Figures:
    """The suite's figures in one JSON file under pytest's base temporary directory: each
    test merges its section in and asserts on what it reads back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, section: str, values: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            data = json.loads(self.path.read_text()) if self.path.exists() else {}
            data[section] = values
            self.path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
            stored: dict[str, Any] = json.loads(self.path.read_text())[section]
        print(f"\nreliability figures [{section}] ({self.path}):\n{json.dumps(stored, indent=2)}")
        return stored


# -- Slack deliveries -------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One request as Slack sends it: the body is kept, so a redelivery is the same."""

    body: str
    key: str  # the delivery ledger's key serve derives from the body
    answer: str  # the name of its response_url on the fake Slack

    @property
    def answer_path(self) -> str:
        return f"/response/{self.answer}"


def slash(fake: FakeSlack, text: str, *, user: str, tag: str) -> Delivery:
    trigger = f"{time.time_ns()}.{tag}"
    body = urlencode(slash_fields(fake, text, name=tag, user=user, trigger=trigger))
    return Delivery(body, f"slack:command:{trigger}", tag)


def click(fake: FakeSlack, action_id: str, *, user: str, tag: str) -> Delivery:
    """A button click; its action_ts is fixed here, so sending it again is the same click
    (a double click, or Slack's retry)."""
    action_ts = f"{time.time():.6f}"
    payload = button_click(fake, action_id, user=user, name=tag, action_ts=action_ts)
    body = urlencode({"payload": json.dumps(payload)})
    return Delivery(body, f"slack:action:{action_ts}:{user}:{action_id}", tag)


def send(
    url: str, d: Delivery, *, retry: int = 0, secret: str = SIGNING_SECRET, timeout: float = 10
) -> httpx.Response:
    """POST the delivery, signed now (a retry is signed again, as Slack does)."""
    headers = signed(d.body, secret=secret)
    if retry:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    return web.post(f"{url}/slack/events", content=d.body, headers=headers, timeout=timeout)


def answers(fake: FakeSlack, d: Delivery) -> list[Call]:
    return [c for c in fake.recorded("/response/") if c.path == d.answer_path]


def wait_answer(fake: FakeSlack, d: Delivery, *, count: int = 1, timeout: float = 30) -> Call:
    return fake.wait_for(lambda c: c.path == d.answer_path, count=count, timeout=timeout)[-1]


def text_of(call: Call) -> str:
    return json.dumps(call.body.get("blocks", [])) + str(call.body.get("text", ""))


def buttons(call: Call) -> tuple[str, str]:
    """The Approve and Reject action ids of a change request's message."""
    actions = next(b for b in call.body["blocks"] if b["type"] == "actions")
    approve, reject = (e["action_id"] for e in actions["elements"])
    return approve, reject


# -- processes --------------------------------------------------------------------------


@dataclass
class Serve:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def kill(self) -> None:
        """SIGKILL to serve and its worker process at once, as when the service's cgroup is
        killed: no shutdown, no draining, no commit that was not already made. (Serve
        alone killed leaves its worker to finish its pass and end; that is a crash of
        its own, tested with the worker.) The worker, forked by the test zygote, is not in
        serve's process group: the group's kill takes the script standing for it, and the
        zygote SIGKILLs the worker when it sees that, a few milliseconds later
        (tests/helpers/zygote.py)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop(self.proc, timeout=15)

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not self.logged(text):
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} never logged {text!r}")
            time.sleep(0.02)


@dataclass
class Cluster:
    """Any number of `queuebot serve` processes on one database, one after another (the
    SIGKILL tests) or side by side (replicas)."""

    workdir: Path
    db_url: str
    fake: FakeSlack
    toml: str = ""
    env: dict[str, str] = field(default_factory=dict)
    serves: list[Serve] = field(default_factory=list)
    _db: psycopg.Connection[Any] | None = None

    def __post_init__(self) -> None:
        self.config = self.workdir / "queuebot.toml"
        self.config.write_text(
            # the demo's own [redrive] table gives way to the suite's (TOML allows one)
            DEMO_CONFIG.format(config=self.config).split("\n[redrive]")[0] + BASE_TOML + self.toml,
            encoding="utf-8",
        )
        (self.workdir / "logs").mkdir(exist_ok=True)
        base = clean_environ()
        self.process_env = {
            **base,
            "QUEUEBOT_CONFIG": str(self.config),
            "QUEUEBOT_DATABASE_URL": self.db_url,
            "QUEUEBOT_LOG_LEVEL": "INFO",
            "QUEUEBOT_CLAIM_STALE_SECONDS": str(STALE_SECONDS),
            "QUEUEBOT_ALERT_TOKEN": ALERT_TOKEN,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_BASE_URL": self.fake.api_url,
            **self.env,
        }

    # -- serve processes --

    def spawn(self, name: str | None = None, **env: str) -> Serve:
        name = name or f"serve-{len(self.serves) + 1:02d}"
        port = free_port()
        log = self.workdir / "logs" / f"{name}.log"
        argv = [sys.executable, "-m", "bot.cli", "serve", "--port", str(port)]
        proc = self._popen(argv, log, env)
        served = Serve(name, proc, f"http://127.0.0.1:{port}", log)
        self.serves.append(served)
        return served

    def _popen(self, argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return launch.popen(  # forked from the zygote: a restart waits for no imports
                argv,
                cwd=self.workdir,
                env={**self.process_env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, for kill()
            )

    def wait_up(self, served: Serve, timeout: float = 60) -> Serve:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.TransportError):
                if web.get(f"{served.url}/healthz", timeout=2).status_code == 200:
                    return served
            if served.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{served.name} did not start:\n{served.log.read_text()}")
            time.sleep(0.05)

    def start(self, name: str | None = None, **env: str) -> Serve:
        for _ in range(2):  # a free port is only asked for: another process may bind it first
            served = self.spawn(name, **env)
            try:
                return self.wait_up(served)
            except RuntimeError:
                if not port_taken(served.log.read_text(errors="replace")):
                    raise
                self.serves.remove(served)
        return self.wait_up(self.spawn(name, **env))

    def start_many(self, count: int) -> list[Serve]:
        """Side by side: started together, each waited for."""
        spawned = [self.spawn(f"replica-{i + 1}") for i in range(count)]
        return [self.wait_up(s) for s in spawned]

    def logs(self) -> list[Path]:
        return [s.log for s in self.serves]

    def close(self) -> None:
        for served in self.serves:
            served.stop()
        if self._db is not None:
            self._db.close()

    # -- the database, as the test sees it --

    @property
    def db(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed or self._db.broken:
            self._db = psycopg.connect(_pg_conninfo(self.db_url), autocommit=True)
        return self._db

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        for attempt in (1, 2):
            try:
                with self.db.cursor() as cur:
                    cur.execute(statement, params)
                    return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:  # its session was ended (an outage test)
                if attempt == 2 or self._db is None or not self._db.broken:
                    raise
                self._db = None
        raise AssertionError("unreachable")

    def scalar(self, statement: str, params: Any = None) -> Any:
        return self.sql(statement, params)[0][0]

    @contextlib.contextmanager
    def one_snapshot(self) -> Iterator[None]:
        """The block's reads see one moment, even while a process is still committing."""
        with self.db.transaction():
            self.db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The queuebot command line with serve's configuration and environment."""
        return launch.run(
            [sys.executable, "-m", "bot.cli", *args],
            cwd=self.workdir,
            env=self.process_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # -- the delivery ledger --

    def ledger_state(self, d: Delivery) -> str | None:
        rows = self.sql("SELECT state FROM qb_deliveries WHERE key = %s", (d.key,))
        return str(rows[0][0]) if rows else None

    def wait_claim_stale(self, d: Delivery) -> float:
        """Until the dead owner's claim on ``d`` is stale (as QUEUEBOT_CLAIM_STALE_SECONDS
        has it); the seconds waited."""
        started = time.monotonic()
        while True:  # polled, not slept out: the database's clock says when it is stale
            left = self.scalar(
                "SELECT extract(epoch FROM seen_at + make_interval(secs => %s) - now()) "
                "FROM qb_deliveries WHERE key = %s",
                (STALE_SECONDS, d.key),
            )
            if left is None or float(left) < -0.3:
                return time.monotonic() - started
            assert time.monotonic() - started < STALE_SECONDS + 30, f"{d.key} never went stale"
            time.sleep(0.1)


@contextlib.contextmanager
def cluster(
    workdir: Path,
    *,
    toml: str = "",
    env: dict[str, str] | None = None,
    db_url: str | None = None,
    tracebacks: bool = False,
) -> Iterator[Cluster]:
    """A fake Slack and a cluster on a fresh PostgreSQL database with the demo estate
    (``db_url``: one built already). Its logs are searched for the secrets when it closes,
    and for tracebacks unless ``tracebacks`` (a test that takes the database away)."""
    with contextlib.ExitStack() as stack:
        if db_url is None:
            db_url = stack.enter_context(demo_database("postgres", workdir))
        fake = stack.enter_context(FakeSlack().start())
        c = Cluster(workdir, db_url, fake, toml=toml, env=dict(env or {}))
        try:
            yield c
        finally:
            c.close()
        for log in c.logs():
            text = log.read_text(errors="replace")
            assert MARK not in text, f"a secret in {log}"
            first = text.find("Traceback")
            # shown: what the log said before its first traceback, and that traceback's head
            assert tracebacks or first < 0, f"{log}:\n{text[max(0, first - 1500) : first + 4500]}"


# -- the queue's workers and its dead letters ---------------------------------------------


def add_dead_letters(c: Cluster, *, count: int, error: str, tenant: str = "acme") -> list[str]:
    """``count`` dead-lettered message_job jobs with one error, in one statement; their
    job ids, oldest first. The queue's counts are then written down as of a quarter hour
    ago, so the redrive growth check has a flat baseline that includes them."""
    rows = c.sql(
        """
        WITH n AS (
          SELECT i, gen_random_uuid() AS asset, gen_random_uuid() AS job,
                 gen_random_uuid() AS msg,
                 now() - interval '2 hours' + i * interval '1 millisecond' AS at
          FROM generate_series(1, %(count)s) AS i
        ), assets AS (
          INSERT INTO video_assets (id, tenant_id, source_object_key, status, created_at)
          SELECT asset, %(tenant)s, 'uploads/' || asset || '.mp4', 'READY', at FROM n
        ), jobs AS (
          INSERT INTO clip_jobs (id, asset_id, tenant_id, status, attempt_count,
                                 progress_percent, error_message, created_at, started_at,
                                 finished_at)
          SELECT job, asset, %(tenant)s, 'FAILED', 3, 20, %(error)s, at, at, at FROM n
        ), messages AS (
          INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at,
                                      claimed_at, last_error)
          SELECT msg, job, 'DLQ', 3, at, at, %(error)s FROM n
        )
        SELECT CAST(job AS text) FROM n ORDER BY i
        """,
        {"count": count, "tenant": tenant, "error": error},
    )
    record_counts(c, ago_minutes=15)
    return [r[0] for r in rows]


def record_counts(c: Cluster, *, ago_minutes: int) -> None:
    """Write the queues' counts down as queuebot's sampler would have, back then."""

    async def record() -> None:
        engine = create_engine(c.db_url)
        try:
            estate = Estate(engine=engine, queues=default_queues())
            async with engine.begin() as conn:
                for profile in estate.profiles.values():
                    await samples.record(
                        conn, profile=profile, now=utcnow() - timedelta(minutes=ago_minutes)
                    )
        finally:
            await engine.dispose()

    asyncio.run(record())


class Worker:
    """The queue's workers: every PENDING message is taken and its job completes, every
    ``every`` seconds, in a thread of its own until stopped."""

    def __init__(self, c: Cluster, every: float = 0.1) -> None:
        self.c = c
        self.every = every
        self.completed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Worker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            with psycopg.connect(_pg_conninfo(self.c.db_url), autocommit=True) as conn:
                while not self._stop.is_set():
                    with conn.transaction():
                        done = conn.execute(
                            "WITH m AS (UPDATE queue_messages SET status = 'COMPLETED', "
                            "claimed_at = now() WHERE status = 'PENDING' RETURNING job_id) "
                            "UPDATE clip_jobs SET status = 'SUCCEEDED', progress_percent = 100,"
                            " finished_at = now() WHERE id IN (SELECT job_id FROM m) "
                            "RETURNING id"
                        ).fetchall()
                    self.completed += len(done)
                    self._stop.wait(self.every)
        except BaseException as exc:  # reported when the test leaves the block
            self.error = exc


# -- SIGKILL at a random point ------------------------------------------------------------


@dataclass
class Kill:
    """One SIGKILL and what followed: where it landed (read from the ledger and the fake
    Slack), how long after the restart the person had an answer, and what a redelivery
    sent after that did."""

    delay: float
    phase: str
    answered_after_restart: float | None  # seconds; None: answered before the kill
    outcome: str


PHASES = (
    "mid-work (claim held)",  # claimed (before the ack), nothing committed
    "committed, not yet answered",  # done in the ledger, no answer at the response_url
    "answered, not yet recorded",  # the answer is out, the ledger does not say so yet
    "after the answer",
)


def kill_and_finish(
    c: Cluster,
    served: Serve,
    d: Delivery,
    *,
    delay: float,
    at_kill: Callable[[], None],
    retry: bool,
) -> tuple[Serve, Kill]:
    """Send ``d``, SIGKILL serve ``delay`` seconds after the ack, check ``at_kill``, start
    serve again and send nothing: Slack never sends again what it saw acknowledged, so
    the restarted serve must finish the work and answer by itself, within 30 s. Then the
    same delivery comes once more (Slack's retry, ``retry``, or a second click), and must
    be ignored: the work was done once."""
    response = send(served.url, d)
    acked = time.monotonic()
    assert response.status_code == 200, response.text
    time.sleep(max(0.0, delay - (time.monotonic() - acked)))
    served.kill()
    time.sleep(0.1)  # an answer already on the wire reaches the fake Slack
    rows = c.sql("SELECT state, answered_at FROM qb_deliveries WHERE key = %s", (d.key,))
    assert rows, f"{d.key} was acknowledged but not written down first"
    state, answered_at = rows[0]
    answered = len(answers(c.fake, d))
    if answered_at is not None:
        phase = PHASES[3]
    elif answered:
        phase = PHASES[2]
    elif state == "claimed":
        phase = PHASES[0]
    else:
        phase = PHASES[1]
    at_kill()
    again = c.start()
    restarted = time.monotonic()
    took: float | None = None
    if answered == 0:
        wait_answer(c.fake, d, timeout=30)
        took = round(time.monotonic() - restarted, 2)
    deadline = time.monotonic() + 30
    while c.scalar("SELECT answered_at FROM qb_deliveries WHERE key = %s", (d.key,)) is None:
        assert time.monotonic() < deadline, f"{d.key} never recorded as answered"
        time.sleep(0.05)
    assert send(again.url, d, retry=1 if retry else 0).status_code == 200
    again.wait_for_log(f"repeated delivery {d.key}: acted on or in hand already, ignored")
    return again, Kill(round(delay, 3), phase, took, "ignored: done already")


def kill_summary(kills: list[Kill]) -> dict[str, Any]:
    waits = sorted(k.answered_after_restart for k in kills if k.answered_after_restart)
    return {
        "kills": len(kills),
        "phases": {p: sum(k.phase == p for k in kills) for p in PHASES},
        "finished by the restarted serve, no redelivery": len(waits),
        "restart to answer (s): fewest, median, most": (
            [waits[0], waits[len(waits) // 2], waits[-1]] if waits else []
        ),
        "redeliveries after the answer": len(kills),
        "redeliveries ignored as done": sum(k.outcome == "ignored: done already" for k in kills),
    }


def new_tag(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def request_redrives(c: Cluster, groups: list[tuple[str, list[str]]]) -> list[int]:
    """Alice's requests to redrive each group of named jobs (reason, job ids), made
    through queuebot's own services as `/queue redrive ID... --reason` would make them
    (a slash command cannot carry 300 ids); the request numbers."""

    async def request() -> list[int]:
        engine = create_engine(c.db_url)
        try:
            changes = wire_services(
                state_engine=engine,
                estate=Estate(engine=engine, queues=default_queues()),
                clock=utcnow,
                approval=ApprovalConfig(large_change_rows=5000),
                redrive=RedriveConfig(),
                notifier=None,
                audit=AuditTrail(),
            ).changes
            numbers = []
            for reason, jobs in groups:
                view = await changes.request(
                    kind=ChangeKind.REDRIVE,
                    queue="clips",
                    selector=Selector(ids=tuple(jobs)),
                    reason=reason,
                    actor=ALICE_ON_SLACK,
                    origin={"platform": "slack", "channel": "C0OPS", "thread": None},
                )
                numbers.append(view.number)
            return numbers
        finally:
            await engine.dispose()

    return asyncio.run(request())


def executions(c: Cluster, number: int) -> int:
    """How many times request ``number`` was executed, as its audit trail says."""
    return int(
        c.scalar(
            "SELECT count(*) FROM qb_audit_events WHERE action = 'change.executed' "
            "AND subject = %s",
            (f"CR-{number}",),
        )
    )


def audit_verify(c: Cluster) -> str:
    """`queuebot audit verify` with serve's configuration: must exit 0."""
    verified = c.cli("audit", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return verified.stdout.strip()
