"""Test support: a shop (migrated database + demo estate + services), a clock, a
simulated worker and a recording notifier."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import App, Services, build_app, wire_services
from bot.demo import DEMO_CONFIG
from services.audit import AuditTrail
from services.changes.requests import ChangeRequests
from services.config import ApprovalConfig, RedriveConfig, load_config
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import DemoEstate, build_demo_estate
from services.estate.estate import Estate
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.message import Message
from services.notify import ChannelRef, MessageRef
from services.plans.service import Plans
from services.reads.service import QueueReads
from services.scheduler import Scheduler
from tests.conftest import holds_demo
from tests.helpers.people import ALICE, BOB
from tests.kinds import ChangeKind

START = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
FAST = RedriveConfig(velocity=100_000, poll_seconds=5)


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@dataclass
class Posted:
    where: str
    message: Message
    update: bool = False


class RecordingNotifier:
    """Implements the notifier port by remembering what was posted (below the chat edge)."""

    def __init__(self) -> None:
        self.posts: list[Posted] = []
        self._n = 0

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        self._n += 1
        name = channel.channel if isinstance(channel, ChannelRef) else channel
        self.posts.append(Posted(f"thread {thread.message_id}" if thread else name, message))
        return [MessageRef("test", name, str(self._n), thread.message_id if thread else None)]

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        self.posts.append(Posted(f"message {ref.message_id}", message, update=True))

    def texts(self) -> list[str]:
        return [p.message.summary for p in self.posts]


@dataclass
class Shop:
    engine: AsyncEngine
    estate: Estate
    reads: QueueReads
    changes: ChangeRequests
    demo: DemoEstate
    services: Services
    clock: Clock = field(default_factory=Clock)
    notifier: RecordingNotifier = field(default_factory=RecordingNotifier)

    @property
    def plans(self) -> Plans:
        return self.services.plans

    @property
    def scheduler(self) -> Scheduler:
        return self.services.scheduler

    def with_approval(self, approval: ApprovalConfig) -> ChangeRequests:
        return build_services(
            self.engine,
            self.estate,
            self.clock,
            self.notifier,
            approval=approval,
            audit=self.services.audit,
        ).changes


CHANNELS = ("alerts", "operators", "actors")  # as if [channels] gave each an id


def build_services(
    engine: AsyncEngine,
    estate: Estate,
    clock: Clock,
    notifier: RecordingNotifier | None,
    redrive: RedriveConfig = FAST,
    approval: ApprovalConfig | None = None,
    audit: AuditTrail | None = None,
    audit_channel: bool = False,
) -> Services:
    return wire_services(
        state_engine=engine,
        estate=estate,
        clock=clock,
        approval=approval or ApprovalConfig(),
        redrive=redrive,
        notifier=notifier,
        audit=audit or AuditTrail(),
        audit_channel=audit_channel,
        channels=CHANNELS,
    )


async def add_dead_letters(
    engine: AsyncEngine,
    *,
    count: int,
    error: str,
    tenant: str = "acme",
    at: datetime = START,
    died_at: datetime | None = None,
) -> list[str]:
    """``count`` more dead-lettered message_job jobs with one error, oldest first, each
    with the ``DLQ`` job event the estate writes when a message dies (at ``died_at``, else
    when the job was made)."""
    jobs: list[str] = []
    async with engine.begin() as conn:
        pg = conn.dialect.name == "postgresql"
        for i in range(count):
            asset, job, msg = (uuid.uuid4() for _ in range(3))
            key = (lambda u: u) if pg else str
            when = at - timedelta(hours=2) + timedelta(seconds=i)
            await conn.execute(
                sa.text(
                    "INSERT INTO video_assets (id, tenant_id, source_object_key, status, "
                    "created_at) VALUES (:a, :t, :k, 'READY', :w)"
                ),
                {"a": key(asset), "t": tenant, "k": f"uploads/{asset}.mp4", "w": when},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO clip_jobs (id, asset_id, tenant_id, status, attempt_count, "
                    "progress_percent, error_message, created_at, started_at, finished_at) VALUES "
                    "(:j, :a, :t, 'FAILED', 3, 20, :e, :w, :w, :w)"
                ),
                {"j": key(job), "a": key(asset), "t": tenant, "e": error, "w": when},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, "
                    "claimed_at, last_error) VALUES (:m, :j, 'DLQ', 3, :w, :w, :e)"
                ),
                {"m": key(msg), "j": key(job), "e": error, "w": when},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO job_events (id, aggregate_id, event_type, message, created_at) "
                    "VALUES (:i, :j, 'DLQ', 'Message moved to DLQ after 3 attempts', :w)"
                ),
                {"i": key(uuid.uuid4()), "j": key(job), "w": died_at or when},
            )
            jobs.append(str(job))
    return jobs


async def simulated_worker(
    engine: AsyncEngine,
    *,
    now: datetime,
    fail: set[str] | None = None,
    error: str = "worker failed again",
    record_deaths: bool = False,
) -> tuple[int, int]:
    """Process every PENDING message: jobs in ``fail`` go back to DLQ/FAILED with
    ``error`` (and, with ``record_deaths``, the ``DLQ`` job event the estate writes when a
    message dies); the rest complete. Returns (completed, failed)."""
    fail = fail or set()
    done = failed = 0
    async with engine.begin() as conn:
        rows = (
            await conn.execute(
                sa.text("SELECT id, job_id FROM queue_messages WHERE status = 'PENDING'")
            )
        ).all()
        for message_id, job_id in rows:
            if str(job_id) in fail:
                await conn.execute(
                    sa.text(
                        "UPDATE queue_messages SET status = 'DLQ', "
                        "attempt_count = attempt_count + 1, claimed_at = :n, last_error = :e "
                        "WHERE id = :m"
                    ),
                    {"n": now, "e": error, "m": message_id},
                )
                await conn.execute(
                    sa.text(
                        "UPDATE clip_jobs SET status = 'FAILED', error_message = :e, "
                        "finished_at = :n WHERE id = :j"
                    ),
                    {"n": now, "e": error, "j": job_id},
                )
                if record_deaths:
                    pg = conn.dialect.name == "postgresql"
                    await conn.execute(
                        sa.text(
                            "INSERT INTO job_events (id, aggregate_id, event_type, message, "
                            "created_at) VALUES (:i, :j, 'DLQ', 'Message moved to DLQ', :n)"
                        ),
                        {"i": uuid.uuid4() if pg else str(uuid.uuid4()), "j": job_id, "n": now},
                    )
                failed += 1
            else:
                await conn.execute(
                    sa.text(
                        "UPDATE queue_messages SET status = 'COMPLETED', claimed_at = :n "
                        "WHERE id = :m"
                    ),
                    {"n": now, "m": message_id},
                )
                await conn.execute(
                    sa.text(
                        "UPDATE clip_jobs SET status = 'SUCCEEDED', progress_percent = 100, "
                        "finished_at = :n WHERE id = :j"
                    ),
                    {"n": now, "j": job_id},
                )
                done += 1
    return done, failed


def said(exc: BaseException) -> str:
    """What a person reads for a service's error (its words live in commands/messages)."""
    from commands.messages import describe
    from services.errors import QueuebotError

    assert isinstance(exc, QueuebotError), exc
    return describe(exc)[1]


def ids_of(rows: list[Any]) -> list[str]:
    return [str(r[0]) for r in rows]


async def rows(shop: Shop, sql: str, **params: Any) -> list[dict[str, Any]]:
    """The rows ``sql`` (fixed test SQL) returns, as dicts."""
    async with shop.engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(sa.text(sql), params)).mappings().all()]


async def five_events(shop: Shop) -> None:
    """CR-1 requested, approved, executed (events 1-3); CR-2 requested, rejected (4, 5)."""
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=4))
    ids = [r.id for r in dead.rows]
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(ids[:2])),
        reason="fixed",
        actor=ALICE,
    )
    await shop.changes.approve(number=1, actor=BOB)
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(ids[2:])),
        reason="fixed too",
        actor=ALICE,
    )
    await shop.changes.reject(number=2, actor=BOB, reason="wait", may_reject_others=True)


async def assert_trail_holds(shop: Shop) -> None:
    """The audit chain verifies and every request, approval and plan in the state tables
    has its events (no flow of queuebot leaves a record without its trail)."""
    async with shop.engine.connect() as conn:
        result = await shop.services.audit.verify(conn)
    assert result.ok, result.problem


@contextlib.asynccontextmanager
async def demo_app(db_url: str, tmp_path: Path, *, extra_config: str = "") -> AsyncIterator[App]:
    """The whole app over the demo estate built at ``START``, configured as ``queuebot
    demo`` writes it plus ``extra_config`` (TOML appended to the file)."""
    if not holds_demo(db_url):
        engine = create_engine(db_url)
        await upgrade(engine)
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=START)
        await engine.dispose()
    path = tmp_path / "queuebot.toml"
    path.write_text(DEMO_CONFIG.format(config=path) + extra_config)
    built = await build_app(load_config(path, environ={"QUEUEBOT_DATABASE_URL": db_url}))
    try:
        yield built
    finally:
        await built.close()
