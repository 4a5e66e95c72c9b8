"""``GET /metrics`` of the app ``queuebot serve`` runs, on SQLite and PostgreSQL: the queue
gauges show exactly the rows in the estate, are read once per interval however often
Prometheus scrapes, survive a queue that cannot be read, and carry no label value from
outside the known vocabularies; commands are counted by name and outcome."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from bot.bootstrap import App, build_app
from bot.http import build_http_app
from commands.catalog import CATALOG
from commands.context import Invocation
from services.changes.model import RequestState
from services.config import load_config
from services.errors import NotFound, PermissionDenied
from services.estate.ddl import create_estate_tables
from services.estate.message_job.schema import JOB_STATES, MESSAGE_STATES
from services.estate.model import NO_REASON, CanonicalState
from services.estate.worker_queue.schema import FAILURE_REASONS
from services.metrics import ORPHAN_PLATFORMS, OUTCOMES
from services.reads.own_gauges import OBLIGATION_STATES, PLAN_JOB_STATES, PLAN_STATES
from tests.helpers.people import ALICE_TOML
from tests.integration.profile_adapters import MessageJobAdapter

NOW = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
CONFIG = (
    """
[queues.workers]
profile = "worker_queue"
[queues.clips]
profile = "message_job"
"""
    + ALICE_TOML
    + """
[metrics]
refresh_seconds = 60
"""
)
# The worker queue's rows: (status, failure_reason, how many, minutes since queued).
WORKER_ROWS = [
    ("queued", None, 1, 10),
    ("queued", None, 1, 20),
    ("queued", None, 1, 30),  # the oldest pending row: 1,800 s
    ("running", None, 2, 5),
    ("done", None, 5, 60),
    ("failed", "timeout", 2, 90),
    ("failed", "implementation_error", 1, 90),
    ("failed", "spawn_oom", 1, 90),
    ("failed", "stale_duplicate", 2, 90),
    ("failed", "other", 1, 90),
    ("failed", None, 1, 90),
    ("failed_permanently", "timeout", 3, 600),  # dead: never actionable
    ("cancelled", None, 1, 120),
]
CLIPS_DEAD, CLIPS_PENDING, CLIPS_DONE = 4, 2, 3

Labels = tuple[tuple[str, str], ...]


def series(text: str) -> dict[tuple[str, Labels], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def of(found: dict[tuple[str, Labels], float], name: str, **labels: str) -> dict[str, float]:
    """The series named ``name`` matching ``labels``, by their one remaining label value
    (or "" when none remains)."""
    out: dict[str, float] = {}
    for (n, pairs), value in found.items():
        have = dict(pairs)
        if n == name and all(have.get(k) == v for k, v in labels.items()):
            rest = [v for k, v in pairs if k not in labels]
            out[rest[0] if rest else ""] = value
    return out


@dataclass
class World:
    app: App
    client: httpx.AsyncClient
    clock: list[float]  # the monotonic clock the metrics read, moved by the test

    async def scrape(self) -> dict[tuple[str, Labels], float]:
        response = await self.client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"] == CONTENT_TYPE_LATEST  # Prometheus text
        return series(response.text)

    def advance(self, seconds: float) -> None:
        self.clock[0] += seconds

    async def run(self, line: str, inv: Invocation) -> None:
        await self.app.router.handle_line(line, inv)


async def add_worker_rows(app: App) -> None:
    profile = app.estate.profiles["workers"]
    async with app.state_engine.begin() as conn:
        q = (await profile.tables(conn))["queue"]
        rows = [
            {
                "job_type": "build",
                "status": status,
                "failure_reason": reason,
                "queued_at": NOW - timedelta(minutes=minutes),
            }
            for status, reason, n, minutes in WORKER_ROWS
            for _ in range(n)
        ]
        await conn.execute(q.table.insert(), rows)


@pytest.fixture
async def world(db_url: str, tmp_path: Path) -> AsyncIterator[World]:
    path = tmp_path / "queuebot.toml"
    path.write_text(CONFIG)
    config = load_config(path, environ={"QUEUEBOT_DATABASE_URL": db_url})
    app = await build_app(config, clock=lambda: NOW, announce=False)
    clock = [1000.0]
    app.metrics.monotonic = lambda: clock[0]
    app.metrics.scrape_wait = 30.0  # a due read on a test estate ends well within this
    try:
        async with app.state_engine.begin() as conn:
            await create_estate_tables(conn, "worker_queue")
            await create_estate_tables(conn, "message_job")
        await add_worker_rows(app)
        async with app.state_engine.begin() as conn:
            await MessageJobAdapter(app.estate.profiles["clips"]).add(
                conn,
                now=NOW,
                dead=CLIPS_DEAD,
                error="ffmpeg exited with code 1",
                pending=CLIPS_PENDING,
                done=CLIPS_DONE,
            )
        transport = httpx.ASGITransport(app=build_http_app(app=app, slack=None))
        async with httpx.AsyncClient(transport=transport, base_url="http://queuebot") as client:
            yield World(app, client, clock)
    finally:
        await app.close()


def count_calls(world: World, queue: str, method: str) -> list[int]:
    """Count the calls of one profile read (how often the estate is asked)."""
    profile = world.app.estate.profiles[queue]
    real: Callable[..., Awaitable[Any]] = getattr(profile, method)
    calls = [0]

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return await real(*args, **kwargs)

    setattr(profile, method, counted)
    return calls


async def test_the_gauges_show_the_rows_of_each_queue(world: World) -> None:
    found = await world.scrape()

    assert of(found, "queuebot_queue_jobs", queue="workers") == {
        "queued": 3,
        "running": 2,
        "done": 5,
        "failed": 8,
        "failed_permanently": 3,
        "cancelled": 1,
    }
    assert of(found, "queuebot_queue_jobs_by_state", queue="workers") == {
        "pending": 3,
        "in_flight": 2,
        "succeeded": 5,
        "failed": 8,
        "dead": 3,
        "cancelled": 1,
        "unknown": 0,
    }
    # failed rows only (failed_permanently is dead), a row without a reason as "(none)"
    assert of(found, "queuebot_queue_failed_by_reason", queue="workers") == {
        "timeout": 2,
        "implementation_error": 1,
        "spawn_oom": 1,
        "stale_duplicate": 2,
        "other": 1,
        NO_REASON: 1,
    }
    assert of(found, "queuebot_queue_failed_actionable") == {"workers": 4}
    assert of(found, "queuebot_queue_dead_letters") == {"workers": 11, "clips": CLIPS_DEAD}
    assert of(found, "queuebot_queue_oldest_pending_age_seconds", queue="workers") == {"": 1800}
    assert of(found, "queuebot_queue_gauges_up") == {"workers": 1, "clips": 1}
    assert of(found, "queuebot_queue_gauges_age_seconds") == {"workers": 0, "clips": 0}

    # message_job: messages by status, dead letters, and no failure-reason series at all
    assert of(found, "queuebot_queue_jobs", queue="clips") == {
        "DLQ": CLIPS_DEAD,
        "PENDING": CLIPS_PENDING,
        "COMPLETED": CLIPS_DONE,
    }
    assert of(found, "queuebot_queue_failed_by_reason", queue="clips") == {}
    assert "clips" not in of(found, "queuebot_queue_failed_actionable")

    assert of(found, "queuebot_change_requests") == {s.value: 0 for s in RequestState}


async def test_scrapes_within_the_interval_read_the_estate_once(world: World) -> None:
    reads = count_calls(world, "workers", "status_counts")
    together = await asyncio.gather(*(world.scrape() for _ in range(5)))
    assert reads == [1]  # five scrapes at once: one read
    assert all(of(f, "queuebot_queue_jobs", queue="workers")["queued"] == 3 for f in together)

    await add_worker_rows(world.app)  # the estate doubles ...
    world.advance(59)
    later = await world.scrape()
    assert reads == [1]  # ... but within the interval nothing is read again
    assert of(later, "queuebot_queue_jobs", queue="workers")["queued"] == 3
    assert of(later, "queuebot_queue_gauges_age_seconds")["workers"] == 59

    world.advance(1)
    due = await world.scrape()
    assert reads == [2]
    assert of(due, "queuebot_queue_jobs", queue="workers")["queued"] == 6
    assert of(due, "queuebot_queue_failed_actionable") == {"workers": 8}


def held_reads(world: World) -> asyncio.Event:
    """The workers queue's counts are read only once the event returned is set."""
    real = world.app.estate.profiles["workers"].status_counts
    release = asyncio.Event()

    async def slow(conn: Any) -> dict[str, int]:
        await release.wait()
        return await real(conn)

    world.app.estate.profiles["workers"].status_counts = slow  # type: ignore[method-assign]
    return release


async def test_a_slow_read_does_not_hold_the_scrape(world: World) -> None:
    await world.scrape()
    world.app.metrics.scrape_wait = 0.25  # as shipped
    release = held_reads(world)
    await add_worker_rows(world.app)
    world.advance(60)
    started = time.monotonic()
    found = await world.scrape()
    # held, it would wait for ever (the read waits for release); not held, 0.25 s plus
    # whatever stall the test process has
    assert time.monotonic() - started < 5.0
    assert of(found, "queuebot_queue_jobs", queue="workers")["queued"] == 3  # the last values
    assert of(found, "queuebot_queue_gauges_age_seconds")["workers"] == 60  # and their age

    release.set()
    for _ in range(100):  # the read finishes in the background
        found = await world.scrape()
        if of(found, "queuebot_queue_jobs", queue="workers")["queued"] == 6:
            break
        await asyncio.sleep(0.05)
    assert of(found, "queuebot_queue_jobs", queue="workers")["queued"] == 6


async def test_a_long_first_reading_answers_with_what_there_is(world: World) -> None:
    release = held_reads(world)
    # The waits are long enough that a stall of the test process (a full garbage
    # collection of its heap, a busy host) cannot pass for one or hide one.
    world.app.metrics.first_wait = 1.5
    started = time.monotonic()
    found = await world.scrape()  # waits for the first reading until 1.5 s after it began
    assert 1.4 < time.monotonic() - started < 3.0
    assert of(found, "queuebot_queue_gauges_up") == {}  # nothing read yet: no queue series
    assert of(found, "queuebot_commands_total", command="help", outcome="ok") == {"": 0}

    world.advance(1.5)  # a scrape after that moment does not wait again
    started = time.monotonic()
    await world.scrape()
    assert time.monotonic() - started < 1.0

    release.set()
    for _ in range(100):
        found = await world.scrape()
        if of(found, "queuebot_queue_gauges_up") == {"workers": 1, "clips": 1}:
            break
        await asyncio.sleep(0.05)
    assert of(found, "queuebot_queue_dead_letters") == {"workers": 11, "clips": CLIPS_DEAD}


async def test_a_queue_that_cannot_be_read_keeps_its_last_values_and_is_down(
    world: World,
) -> None:
    await world.scrape()
    async with world.app.state_engine.begin() as conn:
        await conn.exec_driver_sql("ALTER TABLE dev_r_worker_queue RENAME TO wq_away")
    world.advance(60)
    found = await world.scrape()  # still 200
    assert of(found, "queuebot_queue_gauges_up") == {"workers": 0, "clips": 1}
    assert of(found, "queuebot_queue_dead_letters")["workers"] == 11  # the last good value
    assert of(found, "queuebot_queue_gauges_age_seconds") == {"workers": 60, "clips": 0}

    async with world.app.state_engine.begin() as conn:
        await conn.exec_driver_sql("ALTER TABLE wq_away RENAME TO dev_r_worker_queue")
    world.advance(60)
    found = await world.scrape()
    assert of(found, "queuebot_queue_gauges_up") == {"workers": 1, "clips": 1}
    assert of(found, "queuebot_queue_gauges_age_seconds") == {"workers": 0, "clips": 0}


async def test_commands_are_counted_and_no_label_strays(world: World) -> None:
    alice = Invocation(
        person=world.app.directory.by_account("slack", "U0ALICE"),
        platform="slack",
        account="U0ALICE",
    )
    stranger = Invocation(person=None, platform="slack", account="U0NOBODY")
    await world.run("/queue triage --queue workers", alice)
    await world.run("/queue dlq --queue clips", alice)
    with pytest.raises(PermissionDenied):
        await world.run("/queue requeue 1 --queue workers --reason retry them", stranger)
    with pytest.raises(NotFound):
        await world.run("/queue show 999999 --queue workers", alice)
    found = await world.scrape()

    counted = {
        (dict(labels)["command"], dict(labels)["outcome"]): v
        for (name, labels), v in found.items()
        if name == "queuebot_commands_total" and v
    }
    assert counted == {
        ("triage", "ok"): 1,
        ("dlq", "ok"): 1,
        ("requeue", "refused"): 1,
        ("show", "error"): 1,
    }

    statuses = {*MESSAGE_STATES, *JOB_STATES, *(s for s, _, _, _ in WORKER_ROWS)}
    allowed = {
        "queue": {"workers", "clips"},
        "status": statuses,
        "state": {s.value for s in CanonicalState}
        | {s.value for s in RequestState}
        | {*PLAN_STATES, *PLAN_JOB_STATES, *OBLIGATION_STATES},
        "blocks_redrive": {"true", "false"},
        "reason": {*FAILURE_REASONS, NO_REASON},
        "command": {spec.name for spec in CATALOG},
        "outcome": set(OUTCOMES),
        "platform": set(ORPHAN_PLATFORMS),  # deliveries given up, each from 0
    }
    strays = [
        (name, key, value)
        for name, labels in found
        for key, value in labels
        if value not in allowed.get(key, set())
    ]
    assert strays == []
    assert {name.split("_")[0] for name, _ in found} == {"queuebot"}
